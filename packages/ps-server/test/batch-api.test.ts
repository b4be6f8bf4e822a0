import { describe, expect, it } from 'vitest';
import { ParameterStore, PsError } from '../src/index.js';
import { keys } from './helpers.js';

describe('batch API', () => {
  const mk = () =>
    new ParameterStore({
      tables: [{ name: 'emb', dim: 4, optimizer: { kind: 'sum' } }],
      dense: [{ name: 'w', shape: [2, 3], optimizer: { kind: 'sgd', lr: 0.5 } }],
    });

  it('pull_of_unseen_keys_returns_init_in_request_order', () => {
    const s = new ParameterStore({
      tables: [
        { name: 't', dim: 3, optimizer: { kind: 'sum' }, init: { kind: 'uniform', seed: 7 } },
      ],
    });
    const out = new Float32Array(9);
    s.pullInto('t', keys(5, 9, 5), out);
    expect(Array.from(out.subarray(0, 3))).toEqual(Array.from(out.subarray(6, 9)));
    expect(Array.from(out.subarray(0, 3))).not.toEqual(Array.from(out.subarray(3, 6)));
    for (const v of out) expect(Math.abs(v)).toBeLessThanOrEqual(0.01);
    // Another store with the same seed agrees without storing anything.
    const s2 = new ParameterStore({
      tables: [
        { name: 't', dim: 3, optimizer: { kind: 'sum' }, init: { kind: 'uniform', seed: 7 } },
      ],
    });
    const out2 = new Float32Array(9);
    s2.pullInto('t', keys(5, 9, 5), out2);
    expect(out2).toEqual(out);
  });

  it('push_accumulates_duplicate_keys_and_pull_gathers', async () => {
    const s = mk();
    const g = Float32Array.from([1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400]);
    const r = await s.push('emb', keys(1, 2, 1), g, { session: 'a', seq: 1 });
    expect(r).toEqual({ applied: true, duplicate: false, rows: 2, dropped: 0 });
    const out = new Float32Array(12);
    s.pullInto('emb', keys(2, 1, 3), out);
    expect(Array.from(out)).toEqual([10, 20, 30, 40, 101, 202, 303, 404, 0, 0, 0, 0]);
  });

  it('duplicate_session_seq_is_not_applied_twice', async () => {
    const s = mk();
    const g = Float32Array.from([1, 1, 1, 1]);
    await s.push('emb', keys(1n << 63n), g, { session: 'a', seq: 3 });
    const r = await s.push('emb', keys(1n << 63n), g, { session: 'a', seq: 3 });
    expect(r.duplicate).toBe(true);
    await s.push('emb', keys(1n << 63n), g, { session: 'a', seq: 2 });
    await s.push('emb', keys(1n << 63n), g, { session: 'b', seq: 0 });
    const out = new Float32Array(4);
    s.pullInto('emb', keys(1n << 63n), out);
    expect(Array.from(out)).toEqual([2, 2, 2, 2]);
  });

  it('dense_push_and_pull', async () => {
    const s = mk();
    await s.pushDense('w', Float32Array.from([1, 2, 3, 4, 5, 6]), { session: 'a', seq: 1 });
    const out = new Float32Array(6);
    s.pullDense('w', out);
    expect(Array.from(out)).toEqual([-0.5, -1, -1.5, -2, -2.5, -3]);
  });

  it('bad_inputs_throw_typed_errors', async () => {
    const s = mk();
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(PsError);
        return (e as PsError).code;
      }
      return 'no error';
    };
    expect(code(() => s.pullInto('nope', keys(1), new Float32Array(4)))).toBe(
      'ERR_PS_UNKNOWN_TABLE',
    );
    expect(
      code(() => s.pullInto('emb', [1n] as unknown as BigUint64Array, new Float32Array(4))),
    ).toBe('ERR_PS_INVALID_ARG');
    expect(code(() => s.pullInto('emb', keys(1), new Float32Array(3)))).toBe('ERR_PS_INVALID_ARG');
    expect(code(() => s.push('emb', keys(1), new Float32Array(4), { session: '', seq: 1 }))).toBe(
      'ERR_PS_INVALID_ARG',
    );
    expect(code(() => s.push('emb', keys(1), new Float32Array(4), { session: 'a', seq: -1 }))).toBe(
      'ERR_PS_INVALID_ARG',
    );
    expect(code(() => s.push('emb', keys(1), new Float32Array(4), null as never))).toBe(
      'ERR_PS_INVALID_ARG',
    );
    expect(code(() => s.pushDense('w', new Float32Array(5), { session: 'a', seq: 1 }))).toBe(
      'ERR_PS_INVALID_ARG',
    );
    expect(
      code(
        () => new ParameterStore({ tables: [{ name: 'x', dim: 0, optimizer: { kind: 'sum' } }] }),
      ),
    ).toBe('ERR_PS_INVALID_ARG');
    expect(
      code(
        () =>
          new ParameterStore({ tables: [{ name: 'x', dim: 4097, optimizer: { kind: 'sum' } }] }),
      ),
    ).toBe('ERR_PS_INVALID_ARG');
    expect(
      code(
        () =>
          new ParameterStore({
            tables: [{ name: 'x', dim: 4, optimizer: { kind: 'bogus' } as never }],
          }),
      ),
    ).toBe('ERR_PS_INVALID_ARG');
    expect(
      code(
        () =>
          new ParameterStore({
            tables: [{ name: 'x', dim: 4, optimizer: { kind: 'sgd', lr: Number.NaN } }],
          }),
      ),
    ).toBe('ERR_PS_INVALID_ARG');
    expect(
      code(
        () =>
          new ParameterStore({
            tables: [{ name: 'x', dim: 4, optimizer: { kind: 'sum' }, budgetBytes: 10 }],
          }),
      ),
    ).toBe('ERR_PS_INVALID_ARG');
    await s.close();
    expect(code(() => s.pullInto('emb', keys(1), new Float32Array(4)))).toBe('ERR_PS_CLOSED');
  });

  it('rows_can_live_in_registered_memory_from_the_allocator', async () => {
    const { RegisteredAllocator } = await import('@rdmajs/allocator');
    let n = 0;
    const allocator = new RegisteredAllocator({
      registrar: {
        register: (bytes) => ({ bytes, addr: 0x1000 * ++n, lkey: n, rkey: n }),
        deregister: () => {},
      },
    });
    const s = new ParameterStore({
      memory: allocator,
      tables: [{ name: 'e', dim: 32, optimizer: { kind: 'sum' } }],
    });
    await s.push('e', keys(1, 2), new Float32Array(64).fill(1), { session: 'a', seq: 1 });
    expect(allocator.liveBlocks).toBeGreaterThan(0);
    const out = new Float32Array(64);
    s.pullInto('e', keys(2, 1), out);
    expect(out.every((v) => v === 1)).toBe(true);
    await s.close();
    expect(allocator.liveBlocks).toBe(0);
  });
});
