// Regression test for the sec10 review's M4: one push under another session's id with a
// huge seq must not turn that session's later pushes into "duplicates".
import { expect, it } from 'vitest';
import { ParameterStore } from '../src/index.js';
import { keys } from './helpers.js';

const mk = (maxSeqGap?: number) =>
  new ParameterStore({
    tables: [{ name: 'emb', dim: 1, optimizer: { kind: 'sum' } }],
    dense: [{ name: 'w', shape: [2], optimizer: { kind: 'sum' } }],
    ...(maxSeqGap === undefined ? {} : { maxSeqGap }),
  });

const row = (s: ParameterStore, k: number): number => {
  const out = new Float32Array(1);
  s.pullInto('emb', keys(k), out);
  return out[0] as number;
};

it('a seq more than maxSeqGap above the last applied one is refused with ERR_PS_SEQ_GAP, nothing applied', async () => {
  const s = mk();
  expect((await s.push('emb', keys(7), Float32Array.of(1), { session: 'v', seq: 1 })).applied).toBe(
    true,
  );
  expect(() =>
    s.push('emb', keys(7), Float32Array.of(100), { session: 'v', seq: Number.MAX_SAFE_INTEGER }),
  ).toThrow(expect.objectContaining({ code: 'ERR_PS_SEQ_GAP' }));
  expect(() => s.pushDense('w', Float32Array.of(5, 5), { session: 'v', seq: 1 + 65_537 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_SEQ_GAP' }),
  );
  expect(row(s, 7)).toBe(1);
  expect(s.sessionSeq('v')).toBe(1);
  // The session goes on as before.
  expect((await s.push('emb', keys(7), Float32Array.of(1), { session: 'v', seq: 2 })).applied).toBe(
    true,
  );
  expect(row(s, 7)).toBe(2);
  // Exactly the gap is still accepted (gaps from pushes that never arrived are normal).
  const far = await s.push('emb', keys(7), Float32Array.of(1), { session: 'v', seq: 2 + 65_536 });
  expect(far.applied).toBe(true);
});

it('maxSeqGap is configurable and checked; an unseen session takes any first seq', async () => {
  expect(() => mk(0)).toThrow(expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }));
  const s = mk(4);
  expect(
    (await s.push('emb', keys(1), Float32Array.of(1), { session: 'n', seq: 1_000 })).applied,
  ).toBe(true);
  expect(() => s.push('emb', keys(1), Float32Array.of(1), { session: 'n', seq: 1_005 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_SEQ_GAP' }),
  );
  expect(
    (await s.push('emb', keys(1), Float32Array.of(1), { session: 'n', seq: 1_004 })).applied,
  ).toBe(true);
  // Duplicates below the mark are still acknowledged, not refused.
  const dup = await s.push('emb', keys(1), Float32Array.of(1), { session: 'n', seq: 3 });
  expect(dup.duplicate).toBe(true);
});
