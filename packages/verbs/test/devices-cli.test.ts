import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { exactBigints } from '../src/cli/devices.js';
import { listDevices } from '../src/index.js';

const bin = fileURLToPath(new URL('../bin/rdmajs.js', import.meta.url));

describe('rdmajs devices', () => {
  it('lists every device with provider, ports and limits', () => {
    const text = execFileSync(process.execPath, [bin, 'devices'], { encoding: 'utf8' });
    for (const d of listDevices()) {
      expect(text).toContain(`hca_id:\t${d.name}`);
      expect(text).toMatch(new RegExp(`provider:\\s+${d.provider}`));
      expect(text).toMatch(new RegExp(`maxQpWr:\\s+${d.limits.maxQpWr}`));
      expect(text).toMatch(/state:\s+ACTIVE/);
    }
  });

  it('prints the same data as JSON with --json', () => {
    const json = JSON.parse(
      execFileSync(process.execPath, [bin, 'devices', '--json'], { encoding: 'utf8' }),
    );
    // 64-bit limits (maxMrSize) travel as exact decimal strings.
    expect(json).toEqual(JSON.parse(JSON.stringify(listDevices(), exactBigints)));
    expect(json.find((d: { name: string }) => d.name === 'soft0').limits.maxMrSize).toMatch(
      /^\d+$/,
    );
  });
});
