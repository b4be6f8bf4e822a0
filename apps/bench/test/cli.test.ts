import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));

function runBench(
  args: string[],
  timeout = 120_000,
): {
  stdout: string;
  json: { scenario: string; machine: Record<string, unknown>; results: Record<string, unknown>[] };
} {
  const file = join(mkdtempSync(join(tmpdir(), 'bench-')), 'out.json');
  const stdout = execFileSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@rdmajs/source', cli, ...args, '--json', file],
    {
      encoding: 'utf8',
      timeout,
      env: { ...process.env, CI: '1' },
    },
  );
  return { stdout, json: JSON.parse(readFileSync(file, 'utf8')) };
}

describe('rdmajs-bench verbs-pingpong', () => {
  it('--quick runs 300 iterations at 64 B and 4 KiB and records it in the config', () => {
    const { json } = runBench(['verbs-pingpong', '--quick', '--transports', 'tcp']);
    const cfg = (json as unknown as { config: Record<string, unknown> }).config;
    expect(cfg).toMatchObject({ quick: true, iterations: 300, sizes: [64, 4096] });
    // The ping-pong rows, TCP's throughput, then the machine's two wake-up floor rows.
    expect(json.results.map((r) => r.sizeBytes)).toEqual([64, 4096, 1 << 20, 0, 0]);
  });

  it('measures soft and tcp in one run and writes the documented JSON shape', () => {
    const { stdout, json } = runBench([
      'verbs-pingpong',
      '--iterations',
      '200',
      '--sizes',
      '64,4k',
    ]);
    expect(json.scenario).toBe('verbs-pingpong');
    expect(json.machine).toMatchObject({ node: process.version });
    const keys = json.results.map((r) => `${r.transport}/${r.op}/${r.sizeBytes}`);
    expect(keys).toEqual([
      'tcp/pingpong/64',
      'soft/send-pingpong/64',
      'soft/write-pingpong/64',
      'soft/send-pingpong-events/64',
      'soft/send-pingpong-events-default-spin/64',
      'soft/send-pingpong-events-default-spin-link-tcp/64',
      'soft/send-pingpong-completion-event-link-tcp/64',
      'tcp/pingpong/4096',
      'soft/send-pingpong/4096',
      'soft/write-pingpong/4096',
      'soft/send-pingpong-events/4096',
      'soft/send-pingpong-events-default-spin/4096',
      'soft/send-pingpong-events-default-spin-link-tcp/4096',
      'soft/send-pingpong-completion-event-link-tcp/4096',
      'tcp/throughput/1048576',
      'soft/write-throughput/1048576',
      'soft/write-throughput-link-tcp/1048576',
      'soft/idle-wait/0',
      'soft/write-loop-delay/1073741824',
      'machine/wakeup-floor/0',
      'machine/wakeup-floor-same-vcpu/0',
    ]);
    // Every ping-pong row is pooled from interleaved rounds, each round's p50 kept.
    for (const r of json.results.filter((x) => String(x.op).includes('pingpong'))) {
      expect(r.rounds, `${r.transport}/${r.op}`).toBe(5);
      expect(r.roundP50Us).toHaveLength(5);
    }
    expect(stdout).toContain("this machine's wake-up floor:");
    for (const r of json.results) {
      // The loop-delay row holds stalls beyond the sampling interval: 0 on a quiet loop.
      const floor = r.op === 'write-loop-delay' ? -1 : 0;
      for (const k of ['p50Us', 'meanUs', 'p99Us']) expect(r[k]).toBeGreaterThan(floor);
      expect(r.cpuUsPerOp).toBeGreaterThanOrEqual(0);
      if (String(r.op).includes('pingpong') && r.transport === 'soft') {
        expect(r.heapBytesPerOp).toBeGreaterThanOrEqual(0);
        expect(r.gcCount).toBeGreaterThanOrEqual(0);
      }
      if (String(r.op).includes('throughput')) expect(r.gibPerSec).toBeGreaterThan(0);
    }
    const delay = json.results.find((r) => r.op === 'write-loop-delay') as Record<string, number>;
    for (const k of [
      'maxDelayUs',
      'cpuHeldMaxUs',
      'gcDuringWrite',
      'warmMaxDelayUs',
      'warmGibPerSec',
      'registerUs',
      'fillUs',
      'plainCopyMaxDelayUs',
      'idleMaxDelayUs',
      'gibPerSec',
      'plainCopyGibPerSec',
    ])
      expect(delay[k]).toBeGreaterThanOrEqual(0);
    expect(stdout).toMatch(/p50 vs tcp/);
    // The row in words, in ms, with the target (the table's columns are µs).
    expect(stdout).toMatch(
      /event-loop delay during a 1024 MiB WRITE, fresh process.*target ≤ 10 ms/,
    );
  });

  it('runs TCP alone with --transports tcp', () => {
    const { json } = runBench([
      'verbs-pingpong',
      '--iterations',
      '50',
      '--sizes',
      '64',
      '--transports',
      'tcp',
    ]);
    // TCP's rows, and the machine's reference rows (no transport of ours).
    expect(json.results.every((r) => r.transport === 'tcp' || r.transport === 'machine')).toBe(
      true,
    );
  });

  it('accepts the `--` pnpm passes on (`pnpm bench -- verbs-pingpong --transports tcp`)', () => {
    const { json } = runBench([
      '--',
      'verbs-pingpong',
      '--iterations',
      '50',
      '--sizes',
      '64',
      '--transports',
      'tcp',
    ]);
    expect(json.scenario).toBe('verbs-pingpong');
    expect(json.results.every((r) => r.transport === 'tcp' || r.transport === 'machine')).toBe(
      true,
    );
  });
});

describe('rdmajs-bench without a scenario', () => {
  it("runs the evaluation (the README's main job)", () => {
    const help = execFileSync(
      process.execPath,
      ['--import', 'tsx', '--conditions=@rdmajs/source', cli, '--help'],
      { encoding: 'utf8', timeout: 60_000 },
    );
    // Commander wraps the argument's help: compare with the whitespace collapsed.
    expect(help.replace(/\s+/g, ' ')).toMatch(/ scenario one of: [^()]*\(default: "evaluation"\)/);
  });
});

describe('rdmajs-bench allocator', () => {
  it('compares alloc+free, per-message registration and a bounce copy in one run', () => {
    const { stdout, json } = runBench(['allocator', '--iterations', '300']);
    expect(json.scenario).toBe('allocator');
    expect(json.results.map((r) => r.op)).toEqual([
      'alloc-free',
      'register-per-message',
      'bounce-copy',
    ]);
    const a = json.results[0] as Record<string, number>;
    expect(a.speedupVsRegistration).toBeGreaterThan(0);
    expect(a.memoryOverhead).toBeGreaterThanOrEqual(1);
    expect(stdout).toMatch(/memory overhead/);
  });
});

describe('rdmajs-bench evaluation', () => {
  it('--quick measures fetch and incast push on every target and loses no push to a killed shard', () => {
    const { stdout, json } = runBench(['evaluation', '--quick'], 280_000);
    const rows = json.results as { transport: string; op: string; [k: string]: unknown }[];
    const ops = rows.map((r) => `${r.transport}/${r.op}`);
    for (const t of ['tcp', 'soft', 'grpc']) {
      expect(ops).toContain(`${t}/fetch@50%`);
      expect(ops).toContain(`${t}/push-incast×64`);
    }
    // gRPC, TCP and RDMA also at half gRPC's capacity.
    expect(ops).toContain('grpc/fetch@50%grpc');
    expect(ops).toContain('soft/fetch@50%grpc');
    expect(ops).toContain('tcp/fetch@50%grpc');
    for (const r of rows.filter((x) => x.op.startsWith('fetch@'))) {
      expect(r.failed, `${r.transport} ${r.op}`).toBe(0);
      expect(r.offeredRps).toBeGreaterThan(0);
      expect(r.cdf).toBeInstanceOf(Array);
      // From the scheduled arrival is issue latency plus a lag ≥ 0, sample by sample.
      expect(r.coP99Us as number).toBeGreaterThanOrEqual(r.p99Us as number);
      expect(r.coMeanUs as number).toBeGreaterThanOrEqual(r.meanUs as number);
    }
    // --quick runs the zero-copy ablation beside its reference.
    const zc = rows.find((r) => r.op === 'fetch@50% −zero-copy');
    expect(zc?.referenceOp).toBe('fetch@50% ref');
    expect(zc?.meanVsRef).toBeGreaterThan(0);
    expect(ops).toContain('soft/fetch@50% ref');
    expect(stdout).toContain('ablations: one lesson off');
    expect(stdout).not.toContain('not measured');
    const killed = rows.find((r) => r.op === 'push-shard-killed' && r.transport === 'soft');
    expect(killed).toBeDefined();
    expect(killed?.acked).toBeGreaterThan(0);
    expect(killed?.lost).toBe(0);
    expect(killed?.duplicated).toBe(0);
    expect(killed?.recoveryMs).toBeGreaterThan(0);
    expect(stdout).toContain('headline ratios');
    expect(ops).toContain('machine/wakeup-floor');
    expect(stdout).toContain("this machine's wake-up floor:");
    // Every headline is measured (its value depends on the machine; that it exists does not).
    const summary = (json as unknown as { summary: Record<string, unknown> }).summary;
    for (const k of [
      'fetchMeanRatio',
      'fetchP99Ratio',
      'fetchCpuRatio',
      'pushP99Ratio',
      'grpcFetchMeanRatio',
      'grpcFetchMeanRatioSameLoad',
    ])
      expect(summary[k], k).toBeGreaterThan(0);
    expect(Object.keys(summary.definitions as object)).toContain('grpcFetchMeanRatio');
  }, 300_000);
});
