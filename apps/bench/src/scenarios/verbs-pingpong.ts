import { EchoPeer } from '../peers/EchoPeer.js';
import type { Result, Transport } from '../report/Result.js';
import { iterationsFor, warmupFor } from './iterations.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';
import { tcpPingPong, tcpThroughput } from './tcp.js';
import { verbsIdle, verbsLoopDelay, verbsPingPong, verbsThroughput } from './verbs.js';

const MiB = 1 << 20;
const GiB = 1 << 30;

export const verbsPingPongScenario: Scenario = {
  name: 'verbs-pingpong',
  description:
    'SEND/RECV and RDMA WRITE ping-pong + 1 MiB one-way throughput, verbs vs Node TCP loopback, + event-loop delay during a 1 GiB WRITE',
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const results: Result[] = [];
    const peer = await EchoPeer.spawn();
    const want = (t: Transport) => o.transports.includes(t === 'tcp' ? 'tcp' : 'rdma');
    try {
      for (const size of o.sizes) {
        const iterations = iterationsFor(size, o.iterations);
        const warmup = warmupFor(size, iterations);
        if (want('tcp')) {
          progress(`tcp ping-pong ${size} B`);
          results.push(await tcpPingPong(peer, size, iterations, warmup));
        }
        if (want(o.provider)) {
          for (const mode of ['send', 'write'] as const) {
            progress(`${o.provider} ${mode} ping-pong ${size} B`);
            results.push(await verbsPingPong(peer, o.provider, mode, size, iterations, warmup));
          }
          // Event-driven, as every upper layer waits: pure events, then the default spin.
          for (const wait of [{ spinUs: 0 }, {}]) {
            progress(`${o.provider} send ping-pong ${size} B, waitForCompletion`);
            results.push(
              await verbsPingPong(peer, o.provider, 'send', size, iterations, warmup, { wait }),
            );
          }
          if (o.provider === 'soft') {
            // The link's frames run on the event loop: this row must wait, not busy-poll.
            progress(`soft send ping-pong ${size} B over the TCP link`);
            results.push(
              await verbsPingPong(peer, 'soft', 'send', size, iterations, warmup, {
                wait: {},
                link: 'tcp',
              }),
            );
          }
        }
      }
      const count = Math.max(32, Math.floor(o.iterations / 10));
      if (want('tcp')) {
        progress('tcp 1 MiB throughput');
        results.push(await tcpThroughput(peer, MiB, count));
      }
      if (want(o.provider)) {
        progress(`${o.provider} 1 MiB throughput`);
        results.push(await verbsThroughput(peer, o.provider, MiB, count));
        if (o.provider === 'soft') {
          // Against the raw TCP stream above: the link's frames, answers and copies.
          progress('soft 1 MiB throughput over the TCP link');
          results.push(await verbsThroughput(peer, 'soft', MiB, count, 8, 'tcp'));
        }
        progress(`${o.provider} idle wait`);
        results.push(await verbsIdle(o.provider, 1000));
        progress(`${o.provider} event-loop delay during a 1 GiB WRITE`);
        results.push(await verbsLoopDelay(o.provider, GiB));
      }
    } finally {
      await peer.close();
    }
    return results;
  },
  summarize(results: Result[]): string {
    const r = results.find((x) => x.op === 'write-loop-delay');
    return [r ? loopDelayVerdict(r) : '', linkVerdict(results)].filter((x) => x).join('\n');
  },
};

/** Issue 10's targets for soft's TCP link, against Node TCP in the same run. */
export const LINK_RTT_TARGET = 1.2;
export const LINK_THROUGHPUT_TARGET = 0.8;

/** The link rows against their TCP baselines (64 B round trip p50, 1 MiB throughput). */
export function linkVerdict(results: Result[]): string {
  const find = (op: string, size: number) =>
    results.find((x) => x.op === op && x.sizeBytes === size);
  const lines: string[] = [];
  const tcp = find('pingpong', 64);
  const link = find('send-pingpong-events-default-spin-link-tcp', 64);
  if (tcp && link) {
    const ratio = link.p50Us / tcp.p50Us;
    const met = ratio <= LINK_RTT_TARGET ? 'met' : 'missed';
    lines.push(
      `soft TCP link, 64 B round trip p50: ${ratio.toFixed(2)}× TCP's (target ≤ ${LINK_RTT_TARGET}×: ${met})`,
    );
  }
  const raw = find('throughput', 1 << 20)?.gibPerSec;
  const over = find('write-throughput-link-tcp', 1 << 20)?.gibPerSec;
  if (raw && over) {
    const ratio = over / raw;
    const met = ratio >= LINK_THROUGHPUT_TARGET ? 'met' : 'missed';
    lines.push(
      `soft TCP link, 1 MiB throughput: ${ratio.toFixed(2)}× the raw TCP stream (target ≥ ${LINK_THROUGHPUT_TARGET}×: ${met})`,
    );
  }
  return lines.join('\n');
}

/** Issue 10's bound on the event loop's delay during a 1 GiB WRITE. */
export const LOOP_DELAY_TARGET_MS = 10;

const ms = (us: unknown) => (typeof us === 'number' ? `${(us / 1000).toFixed(1)} ms` : '—');

/** The write-loop-delay row in words and milliseconds (the table's columns are µs). */
export function loopDelayVerdict(r: Result): string {
  const max = typeof r.maxDelayUs === 'number' ? r.maxDelayUs : Number.NaN;
  const held = typeof r.cpuHeldMaxUs === 'number' ? r.cpuHeldMaxUs : Number.NaN;
  const verdict = (v: number) => (v <= LOOP_DELAY_TARGET_MS * 1000 ? 'met' : 'missed');
  return [
    `event-loop delay during a ${r.sizeBytes >> 20} MiB WRITE, fresh process, first WRITE into untouched memory (target ≤ ${LOOP_DELAY_TARGET_MS} ms):`,
    `  p50 ${ms(r.p50Us)}, p99 ${ms(r.p99Us)}, max ${ms(max)} (${verdict(max)}); CPU used between two ticks at most ${ms(held)} (${verdict(held)}: what the code held, the rest is the host); ${String(r.gcDuringWrite)} GCs, longest ${ms(r.gcMaxPauseUs)}`,
    `  warm WRITE: max ${ms(r.warmMaxDelayUs)}, CPU between ticks at most ${ms(r.warmCpuHeldMaxUs)}; the idle loop alone: max ${ms(r.idleMaxDelayUs)} (CPU between ticks ${ms(r.idleCpuHeldMaxUs)}); plain Uint8Array.set: max ${ms(r.plainCopyMaxDelayUs)}`,
    `  registration of 2 regions (synchronous, no page touched): ${ms(r.registerUs)}; the application's own fill of its source: ${ms(r.fillUs)}`,
  ].join('\n');
}
