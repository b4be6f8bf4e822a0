import { describe, expect, it, vi } from 'vitest';
import { ParameterStore } from '../src/index.js';
import { keys, tmpDir } from './helpers.js';

// The 1 GiB record limit lowered to 4 KiB, so an oversized push needs no gigabyte.
vi.mock('../src/internal/record.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../src/internal/record.js')>()),
  MAX_RECORD_BODY: 4096,
}));

describe('a push too large for one log record', () => {
  it('is_refused_before_it_applies_and_the_store_stays_open', async () => {
    const dir = tmpDir('ps-toolarge-');
    const options = {
      dir,
      tables: [{ name: 't', dim: 64, optimizer: { kind: 'sgd' as const, lr: 1 } }],
      dense: [
        { name: 'big', shape: [2048], optimizer: { kind: 'sgd' as const, lr: 1 } },
        { name: 'small', shape: [4], optimizer: { kind: 'sgd' as const, lr: 1 } },
      ],
    };
    const s = await ParameterStore.open(options);
    // Dense: 8 KiB of gradient; sparse: 32 keys × 64 floats. Both over 4 KiB.
    expect(() =>
      s.pushDense('big', new Float32Array(2048).fill(1), { session: 'a', seq: 1 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }));
    const ks = keys(...Array.from({ length: 32 }, (_, i) => i));
    expect(() =>
      s.push('t', ks, new Float32Array(32 * 64).fill(1), { session: 'a', seq: 1 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }));
    // Nothing applied, nothing logged, the seq not taken: the store goes on.
    expect(s.state).toBe('open');
    expect(s.lsn).toBe(0);
    const big = new Float32Array(2048);
    s.pullDense('big', big);
    expect(big.every((v) => v === 0)).toBe(true);
    expect(s.stats('t').rows).toBe(0);
    const r = await s.pushDense('small', Float32Array.of(1, 2, 3, 4), { session: 'a', seq: 1 });
    expect(r.applied).toBe(true);
    await s.push('t', keys(5), new Float32Array(64).fill(2), { session: 'a', seq: 2 });
    await s.close();
    const again = await ParameterStore.open(options);
    expect(again.restoreReport.replayed).toBe(2);
    const small = new Float32Array(4);
    again.pullDense('small', small);
    expect([...small]).toEqual([-1, -2, -3, -4]);
    await again.close();
  });
});
