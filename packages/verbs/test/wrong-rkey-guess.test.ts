// wrong_rkey_guess_reveals_nothing: soft rkeys and QPNs are random, not (slot << 8) | gen
// and a counter, so knowing one key or QPN says nothing about the next; and a wrong guess,
// near a real key or of a deregistered region, fails the same way as any other.
import { afterEach, describe, expect, it } from 'vitest';
import { openDevice } from '../src/index.js';
import { ALL, collect, type Pair, pair, providers } from './harness/pair.js';

/** How many of the 32 bit positions are set in between 25 % and 75 % of the keys. */
function balancedBits(keys: number[]): number {
  let balanced = 0;
  for (let b = 0; b < 32; b++) {
    const ones = keys.filter((k) => (k >>> b) & 1).length / keys.length;
    if (ones > 0.25 && ones < 0.75) balanced++;
  }
  return balanced;
}

describe.runIf(providers.includes('soft'))('soft keys and QP numbers', () => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  it('rkeys carry random bits in every position and are unique', () => {
    const dev = openDevice({ provider: 'soft' });
    try {
      const pd = dev.allocPd();
      const keys = Array.from({ length: 512 }, () => pd.allocMr(64, ALL).rkey);
      expect(new Set(keys).size).toBe(keys.length);
      // (slot << 8) | gen would leave the top 10 bits 0 and the low byte 1 for every key.
      expect(balancedBits(keys)).toBe(32);
      const deltas = new Set(keys.slice(1).map((k, i) => (k - (keys[i] as number)) >>> 0));
      expect(deltas.size).toBeGreaterThan(500); // no stride to follow
    } finally {
      dev.close();
    }
  });

  it('QP numbers do not count up', () => {
    const dev = openDevice({ provider: 'soft' });
    try {
      const pd = dev.allocPd();
      const cq = dev.createCq();
      const qpns = Array.from({ length: 64 }, () => pd.createQp({ sendCq: cq, recvCq: cq }).qpn);
      expect(new Set(qpns).size).toBe(64);
      const steps = qpns.slice(1).filter((q, i) => q === (qpns[i] as number) + 1).length;
      expect(steps).toBe(0);
      for (const q of qpns) expect(q).toBeGreaterThan(1);
    } finally {
      dev.close();
    }
  });

  it('a guess next to a real key and a key that was revoked fail alike: REM_ACCESS_ERR', async () => {
    const statuses: string[] = [];
    for (const guess of ['neighbour', 'revoked'] as const) {
      p = pair('soft');
      const { a, b } = p;
      const old = b.dev.allocPd().allocMr(64, ALL);
      const revoked = old.rkey;
      old.deregister();
      const rkey = guess === 'neighbour' ? (b.mr.rkey + 1) >>> 0 : revoked;
      a.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey,
      });
      statuses.push((await collect(a.cq, 1))[0]?.status as string);
      p.close();
      p = undefined;
    }
    expect(statuses).toEqual(['REM_ACCESS_ERR', 'REM_ACCESS_ERR']);
  });
});
