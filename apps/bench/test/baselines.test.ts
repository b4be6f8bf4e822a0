import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { compareBaselines, median } from '../src/baselines/tcpBaseline.js';
import type { Result } from '../src/report/Result.js';

const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));

describe('compareBaselines', () => {
  it("takes the median of the paired rounds' ratios and flags one beyond 1.2 either way", () => {
    const rows = compareBaselines([
      // One round that caught a burst on either side does not move the median.
      { sizeBytes: 64, bench: [100, 400, 101], script: [99, 100, 900] },
      { sizeBytes: 4096, bench: [100, 100, 100], script: [50, 50, 50] },
      { sizeBytes: 65536, bench: [100, 100], script: [200, 200] },
      { sizeBytes: 1 << 20, bench: [100], script: [90] },
    ]);
    expect(rows.map((r) => [r.sizeBytes, r.benchP50Us, r.scriptP50Us, r.ok])).toEqual([
      [64, 101, 100, true],
      [4096, 100, 50, false],
      [65536, 100, 200, false],
      [1 << 20, 100, 90, true],
    ]);
    expect(rows[0]?.ratio).toBeCloseTo(100 / 99, 6);
    expect(rows[0]?.benchRoundsP50Us).toEqual([100, 400, 101]);
  });

  it('takes the mean of the middle two for an even number of rounds', () => {
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(() => median([])).toThrow(/no samples/);
    expect(() => compareBaselines([{ sizeBytes: 64, bench: [1, 2], script: [1] }])).toThrow(
      /unpaired/,
    );
  });
});

describe('rdmajs-bench --check-baselines', () => {
  it('prints the bench and script p50 and their ratio per size, and records them in the JSON', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'bench-')), 'out.json');
    const args = ['--import', 'tsx', '--conditions=@rdmajs/source', cli, 'verbs-pingpong'];
    args.push('--check-baselines', '--sizes', '64,4k', '--iterations', '300');
    args.push('--transports', 'tcp', '--baseline-rounds', '3', '--json', file);
    const r = spawnSync(process.execPath, args, {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, CI: '1' },
    });
    // Pass or fail is timing on a shared machine; only the verdict's form is asserted.
    expect([0, 1]).toContain(r.status);
    if (r.status === 1) expect(r.stderr).toMatch(/baseline check failed: .*differs/);
    for (const size of [64, 4096])
      expect(r.stdout).toMatch(
        new RegExp(`${size} B {2}bench [\\d.]+ µs {2}script [\\d.]+ µs {2}ratio [\\d.]+×`),
      );
    const json = JSON.parse(readFileSync(file, 'utf8')) as {
      results: Result[];
      baselineCheck: {
        sizeBytes: number;
        benchP50Us: number;
        scriptP50Us: number;
        ratio: number;
        benchRoundsP50Us: number[];
        scriptRoundsP50Us: number[];
      }[];
    };
    expect(json.baselineCheck.map((c) => c.sizeBytes)).toEqual([64, 4096]);
    for (const c of json.baselineCheck) {
      expect(c.benchRoundsP50Us).toHaveLength(3);
      expect(c.scriptRoundsP50Us).toHaveLength(3);
      expect(c.benchP50Us).toBe(median(c.benchRoundsP50Us));
      expect(c.scriptP50Us).toBe(median(c.scriptRoundsP50Us));
      expect(c.scriptP50Us).toBeGreaterThan(0);
      const ratios = c.benchRoundsP50Us.map((b, k) => b / (c.scriptRoundsP50Us[k] as number));
      expect(c.ratio).toBeCloseTo(median(ratios), 6);
    }
  });
});
