// Review L4: entries added while a destination was live must not be posted once its
// registration went away (protection domain closed): read() refuses them up front instead
// of letting the READ fail on the wire and poisoning the read QP.
import { fromProtectionDomain } from '@rdmajs/allocator';
import { openDevice } from '@rdmajs/verbs';
import { expect, it } from 'vitest';
import { RdmaTransport, ReadList } from '../src/index.js';
import { prepareRead } from '../src/internal/prepareRead.js';

const REGION = { incarnation: 7n, addr: 1 << 20, rkey: 9, length: 4096 };

it('a destination whose protection domain closed after add() is refused by read()', () => {
  const dev = openDevice({ provider: 'soft' });
  try {
    const pd = dev.allocPd();
    const alloc = fromProtectionDomain(pd, { arenaBytes: 1 << 20, maxArenaBytes: 1 << 20 });
    const block = alloc.alloc(256);
    const list = new ReadList(4).add(0, 64, block).add(64, 64, block, 64);
    prepareRead(REGION, list, REGION.incarnation, () => true); // live: accepted
    pd.close();
    expect(block.released).toBe(false); // not known yet: nothing read its keys since
    expect(() => prepareRead(REGION, list, REGION.incarnation, () => true)).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_READ_RANGE' }),
    );
    expect(block.released).toBe(true);
  } finally {
    dev.close();
  }
});

it('names its provider: soft unless the device it was given says otherwise', () => {
  const t = new RdmaTransport();
  expect(t.provider).toBe('soft');
  t.close();
});
