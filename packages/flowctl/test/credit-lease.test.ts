// Credit leases: a receiver grows a busy peer's lease (`ReceiveCredits.grow`, the extra
// credits ride as ordinary returns and `SendCredits.grant` takes them up to `maxCredits`), and
// an idle sender gives the extra back (`SendCredits.giveBack`, told to the receiver out of band
// and applied there by `peerReturned`). Whatever the interleaving, the receiver never gets a
// message without a buffer leased for it, and at rest both sides agree on the lease.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, ReceiveCredits, SendCredits } from '../src/index.js';
import { expectCode } from './helpers.js';

describe('credit leases', () => {
  it('grant beyond the outstanding credits grows the lease up to maxCredits, then is a protocol error', () => {
    const sc = new SendCredits({ initialCredits: 4, maxCredits: 10 });
    expect(sc.lease).toBe(4);
    sc.grant(4);
    expect(sc.lease).toBe(8);
    expect(sc.available).toBe(8);
    expect(sc.extra).toBe(4);
    expectCode(() => sc.grant(3), 'ERR_FLOWCTL_PROTOCOL');
    sc.grant(2);
    expect(sc.stats().lease).toBe(10);
    // Without maxCredits the lease is fixed, as before.
    const fixed = new SendCredits({ initialCredits: 4 });
    expectCode(() => fixed.grant(1), 'ERR_FLOWCTL_PROTOCOL');
  });

  it('giveBack returns only extra credits in hand, never the reserve nor below the initial lease', () => {
    const sc = new SendCredits({ initialCredits: 4, maxCredits: 16 });
    expect(sc.giveBack()).toBe(0);
    sc.grant(8); // lease 12, all in hand
    for (let i = 0; i < 10; i++) expect(sc.tryConsume()).toBe(true); // 2 left: 1 usable + reserve
    expect(sc.giveBack()).toBe(1);
    expect(sc.lease).toBe(11);
    expect(sc.available).toBe(1);
    sc.grant(10); // the receiver returned every spent credit
    expect(sc.giveBack(3)).toBe(3);
    expect(sc.giveBack()).toBe(4);
    expect(sc.lease).toBe(4);
    expect(sc.available).toBe(4);
    expect(sc.stats().givenBack).toBe(8);
  });

  it('grow owes the new credits at once and scales the return threshold with the lease', () => {
    const clock = new ManualClock();
    let due = 0;
    const rc = new ReceiveCredits({
      initialCredits: 8,
      returnThreshold: 2,
      flushDelayMs: 5,
      clock,
      onUpdateNeeded: () => due++,
    });
    rc.grow(24);
    expect(rc.capacity).toBe(32);
    expect(rc.returnThreshold).toBe(8);
    expect(rc.updateNeeded).toBe(true);
    expect(due).toBe(1);
    expect(rc.takeUpdate()).toBe(24);
    expect(rc.peerCredits).toBe(32);
    expectCode(() => rc.peerReturned(25), 'ERR_FLOWCTL_PROTOCOL'); // below the initial lease
    rc.peerReturned(24);
    expect(rc.capacity).toBe(8);
    expect(rc.returnThreshold).toBe(2);
    expect(rc.params()).toEqual({ initialCredits: 8, reservedCredits: 1, returnThreshold: 2 });
  });

  it('a peer cannot give back credits it does not hold', () => {
    const rc = new ReceiveCredits({ initialCredits: 8 });
    rc.grow(8);
    expect(rc.takePiggyback()).toBe(8);
    for (let i = 0; i < 12; i++) expect(rc.onReceive()).toBe(true);
    expect(rc.peerCredits).toBe(4);
    expectCode(() => rc.peerReturned(5), 'ERR_FLOWCTL_PROTOCOL');
    rc.peerReturned(4);
    expect(rc.capacity).toBe(12);
  });

  it('random interleavings: never an overrun, and at rest both sides agree', () => {
    type Op =
      | { k: 'send' }
      | { k: 'deliver' }
      | { k: 'app'; n: number }
      | { k: 'returnCredits' }
      | { k: 'deliverCredits' }
      | { k: 'grow'; n: number }
      | { k: 'giveBack' }
      | { k: 'deliverGiveBack' };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.constant({ k: 'send' as const }),
      fc.constant({ k: 'deliver' as const }),
      fc.integer({ min: 1, max: 4 }).map((n) => ({ k: 'app' as const, n })),
      fc.constant({ k: 'returnCredits' as const }),
      fc.constant({ k: 'deliverCredits' as const }),
      fc.integer({ min: 1, max: 12 }).map((n) => ({ k: 'grow' as const, n })),
      fc.constant({ k: 'giveBack' as const }),
      fc.constant({ k: 'deliverGiveBack' as const }),
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 16 }),
        fc.integer({ min: 0, max: 48 }),
        fc.array(op, { maxLength: 300 }),
        (initial, headroom, ops) => {
          const max = initial + headroom;
          const clock = new ManualClock();
          const sc = new SendCredits({ initialCredits: initial, maxCredits: max, clock });
          const rc = new ReceiveCredits({ initialCredits: initial, clock, flushDelayMs: 1 });
          let inFlight = 0; // messages on the wire (the RDMA path)
          let held = 0; // messages the receiving application holds
          const credits: number[] = []; // credit returns on the wire, in order
          const giveBacks: number[] = []; // lease returns on the control path, in order
          // Buffers leased to the peer, as a shared pool would count them.
          const buffers = () => rc.capacity;
          for (const o of ops) {
            switch (o.k) {
              case 'send':
                if (sc.tryConsume()) inFlight++;
                break;
              case 'deliver':
                if (inFlight > 0) {
                  inFlight--;
                  expect(rc.onReceive()).toBe(true);
                  held++;
                }
                break;
              case 'app': {
                const n = Math.min(o.n, held);
                if (n > 0) {
                  rc.release(n);
                  held -= n;
                }
                break;
              }
              case 'returnCredits': {
                const n = rc.takePiggyback();
                if (n > 0) credits.push(n);
                break;
              }
              case 'deliverCredits': {
                const n = credits.shift();
                if (n !== undefined) sc.grant(n);
                break;
              }
              case 'grow': {
                // The receiver never leases more than the peer accepts.
                const room = max - rc.capacity;
                if (room > 0) rc.grow(Math.min(o.n, room));
                break;
              }
              case 'giveBack': {
                const n = sc.giveBack();
                if (n > 0) giveBacks.push(n);
                break;
              }
              case 'deliverGiveBack': {
                const n = giveBacks.shift();
                if (n !== undefined) rc.peerReturned(n);
                break;
              }
            }
            // The exactness the transport relies on: every message in flight or held has a
            // buffer of the lease, and the sender never holds more than the receiver leased.
            expect(rc.inUse + inFlight).toBeLessThanOrEqual(buffers());
            expect(sc.available + inFlight).toBeLessThanOrEqual(rc.peerCredits);
            expect(rc.stats().overruns).toBe(0);
            expect(rc.stats().creditViolations).toBe(0);
            expect(sc.lease).toBeLessThanOrEqual(max);
          }
          // Settle everything: deliver, release, return, give back.
          while (inFlight > 0) {
            inFlight--;
            expect(rc.onReceive()).toBe(true);
            held++;
          }
          if (held > 0) rc.release(held);
          for (const n of giveBacks.splice(0)) rc.peerReturned(n);
          const last = rc.takePiggyback();
          if (last > 0) credits.push(last);
          for (const n of credits.splice(0)) sc.grant(n);
          expect(sc.lease).toBe(rc.capacity);
          expect(sc.available).toBe(rc.peerCredits);
          expect(sc.available).toBe(sc.lease);
          // An idle sender goes back to the floor.
          const back = sc.giveBack();
          if (back > 0) rc.peerReturned(back);
          expect(sc.lease).toBe(initial);
          expect(rc.capacity).toBe(initial);
        },
      ),
      { numRuns: 300 },
    );
  });
});
