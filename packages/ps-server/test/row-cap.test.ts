// Security review F4: a table without budgetBytes could be grown by pushes of new keys until
// the process ran out of memory. `maxRows` caps it without a budget: new keys beyond are
// dropped (counted), known rows still update, nothing is evicted.
import { expect, it } from 'vitest';
import { MAX_ROWS, ParameterStore } from '../src/index.js';

const keysOf = (from: number, n: number) =>
  BigUint64Array.from({ length: n }, (_, i) => BigInt(from + i));

it('a_flood_of_new_keys_stops_at_maxRows_and_known_rows_keep_updating', async () => {
  const s = new ParameterStore({
    tables: [{ name: 'emb', dim: 2, optimizer: { kind: 'sum' }, maxRows: 100 }],
  });
  let seq = 0;
  let dropped = 0;
  for (let b = 0; b < 10; b++) {
    const r = await s.push('emb', keysOf(b * 64, 64), new Float32Array(128).fill(1), {
      session: 'attacker',
      seq: ++seq,
    });
    dropped += r.dropped;
  }
  expect(s.stats('emb')).toMatchObject({ rows: 100, maxRows: 100 });
  expect(dropped).toBe(640 - 100);
  // A key the table holds still takes its gradients.
  const r = await s.push('emb', keysOf(0, 1), Float32Array.of(1, 1), { session: 'w', seq: 1 });
  expect([r.rows, r.dropped]).toEqual([1, 0]);
  const out = new Float32Array(2);
  s.pullInto('emb', keysOf(0, 1), out);
  expect([...out]).toEqual([2, 2]);
});

it('maxRows_is_checked_and_only_for_tables_without_a_budget', () => {
  const t = (extra: object) => () =>
    new ParameterStore({ tables: [{ name: 'e', dim: 1, optimizer: { kind: 'sum' }, ...extra }] });
  expect(t({ maxRows: 0 })).toThrow(expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }));
  expect(t({ maxRows: MAX_ROWS + 1 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }),
  );
  expect(t({ maxRows: 10, budgetBytes: 1 << 20 })).toThrow(
    /maxRows is for tables without budgetBytes/,
  );
  expect(
    new ParameterStore({ tables: [{ name: 'e', dim: 1, optimizer: { kind: 'sum' } }] }).stats('e')
      .maxRows,
  ).toBe(Number.POSITIVE_INFINITY);
});
