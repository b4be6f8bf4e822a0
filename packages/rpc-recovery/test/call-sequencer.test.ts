import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CallSequencer, DeduplicationTable, RpcError } from '../src/index.js';

describe('CallSequencer', () => {
  it('ackBelow is always the lowest unsettled sequence, and the window is never exceeded', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.nat(1000),
        fc.array(fc.oneof(fc.constant(-1), fc.nat(20)), { maxLength: 200 }),
        (maxInFlight, firstSeq, ops) => {
          const s = new CallSequencer({ maxInFlight, firstSeq });
          const pending = new Set<number>();
          let next = firstSeq;
          for (const op of ops) {
            if (op === -1) {
              if (pending.size < maxInFlight && s.canSend) {
                expect(s.next()).toBe(next);
                pending.add(next++);
              } else if (!s.canSend) {
                expect(() => s.next()).toThrow(RpcError);
              }
            } else {
              const seq = firstSeq + op;
              expect(s.settle(seq)).toBe(pending.delete(seq));
            }
            const low = pending.size === 0 ? next : Math.min(...pending);
            expect(s.ackBelow).toBe(low);
            expect(s.inFlight).toBe(pending.size);
            expect(next - s.ackBelow).toBeLessThanOrEqual(maxInFlight);
            for (let q = firstSeq; q < next + 2; q++) expect(s.isPending(q)).toBe(pending.has(q));
          }
        },
      ),
    );
  });

  it('with maxInFlight at the server bound, the server never refuses for a full session', () => {
    fc.assert(
      fc.property(fc.array(fc.boolean(), { maxLength: 300 }), (sendOrReply) => {
        const table = new DeduplicationTable({ maxEntriesPerSession: 4 });
        table.openSession('c');
        const seqr = new CallSequencer({ maxInFlight: 4 });
        const outstanding: number[] = [];
        for (const send of sendOrReply) {
          if (send && seqr.canSend) {
            const seq = seqr.next();
            expect(table.begin('c', seq, seqr.ackBelow).status).toBe('new'); // never SESSION_FULL
            table.complete('c', seq, new Uint8Array([seq & 255]));
            outstanding.push(seq);
          } else if (outstanding.length > 0) {
            seqr.settle(outstanding.splice(outstanding.length > 1 ? 1 : 0, 1)[0] as number);
          }
        }
      }),
    );
  });

  it('bad options are typed mistakes', () => {
    expect(() => new CallSequencer({ maxInFlight: 0 })).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
    expect(() => new CallSequencer({ firstSeq: -1 })).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
    const s = new CallSequencer();
    expect(s.settle(Number.NaN)).toBe(false);
    expect(s.settle(5)).toBe(false);
  });
});
