import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../src/push-cpu.ts', import.meta.url));

describe('push-cpu, the focused push-path profile', () => {
  it('measures both transports against the same shards, then again over fresh connections', () => {
    const stdout = execFileSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--conditions=@rdmajs/source',
        script,
        ...['--rounds', '2', '--bursts', '1', '--concurrency', '4', '--keys', '16'],
        ...['--warmup', '1', '--reconnect'],
      ],
      { encoding: 'utf8', timeout: 110_000 },
    );
    const lines = stdout.split('\n');
    // Two phases, each with one row per round carrying both transports, then the means.
    expect(lines.filter((l) => l.startsWith('fresh ')).length).toBe(2);
    const rounds = lines.filter((l) => l.startsWith('round '));
    expect(rounds.length).toBe(4);
    for (const r of rounds) {
      expect(r).toMatch(/tcp +client +\d+ shards +\d+ µs\/push/);
      expect(r).toMatch(/rdma client +\d+ shards +\d+ µs\/push/);
      // Every push of the round was acknowledged.
      expect(r.match(/failed 0/g)?.length).toBe(2);
    }
    const means = lines.filter((l) => l.startsWith('mean '));
    expect(means.length).toBe(4);
    for (const m of means) {
      const [, client, shards, total] = /client (\d+) shards (\d+) total (\d+)/.exec(m) ?? [];
      expect(Number(client)).toBeGreaterThan(0);
      expect(Number(shards)).toBeGreaterThan(0);
      // Rounded parts: their sum is within 1 µs of the rounded total.
      expect(Math.abs(Number(client) + Number(shards) - Number(total))).toBeLessThanOrEqual(1);
    }
  }, 120_000);
});
