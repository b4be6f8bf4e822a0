import { describe, expect, it } from 'vitest';
import {
  decodePullRequest,
  decodePushRequest,
  encodePullRequest,
  encodePushRequest,
} from '../src/index.js';

const keys = BigUint64Array.of(1n, 2n);

describe('names seen before', () => {
  it('a_cached_name_does_not_let_a_name_one_byte_off_through', () => {
    const good = encodePullRequest({ table: 'emb64', keys });
    expect(decodePullRequest(good).table).toBe('emb64');
    expect(decodePullRequest(good).table).toBe('emb64');
    const bad = good.slice();
    bad[16 + 4] = 0x24; // 'emb6$': same length, a byte outside the pattern
    expect(() => decodePullRequest(bad)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_FIELD' }),
    );
    const other = good.slice();
    other[16 + 4] = 0x35; // 'emb65': valid, not the cached one
    expect(decodePullRequest(other).table).toBe('emb65');
  });

  it('more_names_than_the_cache_holds_still_round_trip_twice', () => {
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 40; i++) {
        const table = `t${i}`;
        const writer = `w${i}`;
        expect(decodePullRequest(encodePullRequest({ table, keys })).table).toBe(table);
        const push = decodePushRequest(
          encodePushRequest({ table, writer, seq: i, dim: 1, keys, grads: new Float32Array(2) }),
        );
        expect([push.table, push.writer]).toEqual([table, writer]);
      }
    }
  });

  it('encoding_still_refuses_a_bad_name_after_good_ones', () => {
    encodePullRequest({ table: 'ok', keys });
    expect(() => encodePullRequest({ table: 'no way', keys })).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
    expect(() =>
      encodePushRequest({
        table: 'ok',
        writer: 'bad.writer',
        seq: 1,
        dim: 1,
        keys,
        grads: new Float32Array(2),
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }));
  });

  it('a_name_decoded_from_a_buffer_is_copied_not_kept_as_a_view_of_receive_memory', () => {
    // The TCP transport hands handlers Buffers, whose slice() is a view: a cached view would
    // pin the whole frame and read whatever reuses its memory next.
    const asFromPeer = (table: string) => {
      const b = Buffer.from(encodePullRequest({ table: 'zzz_0', keys }));
      b.write(table, b.indexOf('zzz_0', 0, 'latin1'), 'latin1');
      return b;
    };
    const recv = Buffer.alloc(1 << 20);
    const first = asFromPeer('cpy_a');
    recv.set(first, 0);
    expect(decodePullRequest(recv.subarray(0, first.length)).table).toBe('cpy_a');
    const second = asFromPeer('cpy_b');
    recv.set(second, 0); // the receive memory is reused for another table's request
    expect(decodePullRequest(Buffer.from(second)).table).toBe('cpy_b');
    expect(decodePullRequest(Buffer.from(first)).table).toBe('cpy_a');
  });
});
