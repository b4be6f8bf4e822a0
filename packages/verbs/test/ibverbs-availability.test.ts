// Without libibverbs or without RDMA devices, the ibverbs provider explains itself in one
// typed error, and the soft provider keeps working.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ibverbsStatus, openDevice } from '../src/index.js';

describe('ibverbs availability', () => {
  it('without libibverbs the addon still loads: one typed error names the cause and soft', () => {
    const script = fileURLToPath(new URL('./fixtures/ibverbs-missing.ts', import.meta.url));
    const out = JSON.parse(
      execFileSync(process.execPath, ['--import', 'tsx', script], {
        env: { ...process.env, RDMAJS_LIBIBVERBS: '/nonexistent/libibverbs.so.1' },
        encoding: 'utf8',
        timeout: 60_000,
      }),
    );
    expect(out.status.devices).toEqual([]);
    if (out.status.compiled) expect(out.status.reason).toMatch(/cannot load/);
    expect(out.error.code).toBe('ERR_RDMA_PROVIDER_UNAVAILABLE');
    expect(out.error.message).toContain(out.status.reason);
    expect(out.error.message).toContain("provider: 'soft'");
    expect(out.autoProvider).toBe('soft');
    expect(out.devices).toEqual(['soft0']);
    expect(out.softSend).toBe('SUCCESS');
  });

  it.runIf(ibverbsStatus().devices.length === 0)(
    'without an RDMA device, provider ibverbs says so; auto falls back to soft',
    () => {
      expect(() => openDevice({ provider: 'ibverbs' })).toThrow(
        expect.objectContaining({
          code: 'ERR_RDMA_PROVIDER_UNAVAILABLE',
          message: expect.stringMatching(/not available: (no RDMA device|it was not compiled)/),
        }),
      );
      const dev = openDevice();
      expect(dev.provider).toBe('soft');
      dev.close();
    },
  );
});
