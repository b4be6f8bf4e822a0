import { describe, expect, it } from 'vitest';
import {
  MAX_SLABS,
  ReceiveSlabs,
  SLAB_BYTES,
  SLAB_PAYLOAD_MAX,
  type Slab,
} from '../src/internal/ReceiveSlabs.js';

/** take() and the slab it cut from (undefined: a buffer of its own). */
function take(slabs: ReceiveSlabs, n: number): { bytes: Uint8Array; slab: Slab | undefined } {
  const bytes = slabs.take(n);
  return { bytes, slab: slabs.last };
}

describe('ReceiveSlabs', () => {
  it('messages_released_promptly_reuse_one_slab_from_its_start', () => {
    const slabs = new ReceiveSlabs();
    const first = take(slabs, 22_000);
    first.slab?.unpin();
    for (let i = 0; i < 1000; i++) {
      const m = take(slabs, 22_000);
      expect(m.slab).toBe(first.slab);
      expect(m.bytes.byteOffset).toBe(0);
      m.slab?.unpin();
    }
  });

  it('payloads_are_cut_back_to_back_8_byte_aligned_without_overlap', () => {
    const slabs = new ReceiveSlabs();
    const a = take(slabs, 13);
    const b = take(slabs, 100);
    expect(b.slab).toBe(a.slab);
    expect(b.bytes.byteOffset).toBe(16);
    expect(b.bytes.length).toBe(100);
  });

  it('held_messages_pin_at_most_MAX_SLABS_slabs_then_payloads_get_their_own_buffers', () => {
    const slabs = new ReceiveSlabs();
    const held: { bytes: Uint8Array; slab: Slab | undefined }[] = [];
    const perSlab = Math.floor(SLAB_BYTES / SLAB_PAYLOAD_MAX);
    for (let i = 0; i < MAX_SLABS * perSlab + 3; i++) held.push(take(slabs, SLAB_PAYLOAD_MAX));
    const distinct = new Set(held.map((m) => m.slab).filter((s) => s !== undefined));
    expect(distinct.size).toBe(MAX_SLABS);
    const own = held.slice(MAX_SLABS * perSlab);
    for (const m of own) {
      expect(m.slab).toBeUndefined();
      expect(m.bytes.buffer.byteLength).toBe(SLAB_PAYLOAD_MAX);
    }
    // Larger payloads never go to a slab.
    expect(take(slabs, SLAB_PAYLOAD_MAX + 1).slab).toBeUndefined();
    // Once every message of a retired slab is released it is cut from again.
    const first = held[0]?.slab as Slab;
    for (const m of held) if (m.slab === first) m.slab.unpin();
    const next = take(slabs, 100);
    expect(next.slab).toBe(first);
    expect(next.bytes.byteOffset).toBe(0);
  });

  it('a_slab_still_held_is_never_cut_from_twice', () => {
    const slabs = new ReceiveSlabs();
    const kept = take(slabs, 1000); // held for the whole test
    kept.bytes.fill(7);
    for (let i = 0; i < 200; i++) {
      const m = take(slabs, 50_000);
      m.bytes.fill(1);
      m.slab?.unpin();
    }
    expect(kept.bytes.every((v) => v === 7)).toBe(true);
  });
});

describe('payload memory handed out', () => {
  it('is_a_plain_Uint8Array_so_slice_copies_and_a_copy_survives_the_slab_reuse', () => {
    // Buffer's slice() is a view: a caller that copied a reply with slice() and released the
    // message saw the next message's bytes in its copy (RpcClient did; found by its tests).
    const slabs = new ReceiveSlabs();
    for (const n of [16, SLAB_PAYLOAD_MAX + 1]) {
      const m = take(slabs, n);
      expect(Buffer.isBuffer(m.bytes)).toBe(false);
      m.bytes.fill(1);
      const copy = m.bytes.slice();
      m.slab?.unpin();
      take(slabs, n).bytes.fill(2);
      expect(copy.every((b) => b === 1)).toBe(true);
    }
  });
});

describe('idle trimming', () => {
  it('an_idle_connection_drops_the_slabs_no_message_holds_and_keeps_held_ones', () => {
    const slabs = new ReceiveSlabs();
    const dropped: Slab[] = [];
    const a = take(slabs, 100);
    const b = take(slabs, SLAB_PAYLOAD_MAX);
    expect(slabs.count).toBe(1);
    slabs.trimIdle((s) => dropped.push(s)); // payloads were taken since: nothing dropped
    expect(dropped).toEqual([]);
    slabs.trimIdle((s) => dropped.push(s)); // idle, but both messages still hold the slab
    expect(dropped).toEqual([]);
    expect(slabs.count).toBe(1);
    a.slab?.unpin();
    b.slab?.unpin();
    slabs.trimIdle((s) => dropped.push(s));
    expect(dropped).toEqual([a.slab]);
    expect(slabs.count).toBe(0);
    // Traffic again: a new slab, cut from its start.
    const c = take(slabs, 10);
    expect(c.slab).not.toBe(a.slab);
    expect(c.bytes.byteOffset).toBe(0);
    expect(slabs.count).toBe(1);
  });
});
