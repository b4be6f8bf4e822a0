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
};
