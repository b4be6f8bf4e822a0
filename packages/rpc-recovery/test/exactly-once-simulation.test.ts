import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CallSequencer,
  DeduplicationTable,
  decodeRpcFrame,
  encodeRequestHeader,
  encodeResponseHeader,
  RpcError,
  RpcStatus,
  resumptionProof,
  SessionAuthority,
  SessionStateMachine,
} from '../src/index.js';

/*
 * The pieces composed as the RPC layer will compose them, over a simulated lossy link and
 * a counter server that crashes at random points and restarts from its persisted state
 * (count and de-duplication table saved together). The client sends non-idempotent
 * increments, each retried with the same sequence until a reply arrives, resuming its
 * session after every crash. Exactly once, counted: the final count equals the number of
 * increments, and the replies the client saw are 1, 2, ..., N (a double execution would skip
 * a value, a lost one would repeat it).
 */

/** mulberry32: a small seeded PRNG, so every run is reproducible from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEY = new Uint8Array(32).fill(3);
const u32 = (x: number) => new Uint8Array([x >>> 24, (x >>> 16) & 255, (x >>> 8) & 255, x & 255]);
const readU32 = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, 4).getUint32(0);

class Crash extends Error {}

/** The counter service: state and de-duplication table persisted together after each increment. */
class CounterServer {
  disk = { count: 0, table: new DeduplicationTable().save() };
  count = 0;
  table = new DeduplicationTable();
  authority = new SessionAuthority({ key: KEY });

  constructor(
    private readonly crashAt: () => 'none' | 'before' | 'after-apply' | 'after-persist',
  ) {}

  boot(): void {
    this.count = this.disk.count;
    this.table = new DeduplicationTable();
    this.table.restore(this.disk.table);
    this.authority = new SessionAuthority({ key: KEY });
    for (const id of this.table.sessionIds()) this.authority.adopt(id, 1);
  }

  /** Handles one request frame on the connection of `sessionId` at `epoch`; a Crash loses the reply. */
  handle(sessionId: string, epoch: number, frame: Uint8Array): Uint8Array {
    const f = decodeRpcFrame(frame);
    if (f.kind !== 'request') throw new Error('unexpected frame');
    const h = f.header;
    const where = this.crashAt();
    if (where === 'before') throw new Crash();
    let reply: Uint8Array;
    try {
      const found = this.table.begin(sessionId, h.sessionSeq, h.ackBelow);
      if (found.status === 'new') {
        this.count++; // the effect and complete() in one tick: nothing half-applied is saved
        this.table.complete(sessionId, h.sessionSeq, u32(this.count));
        if (where === 'after-apply') throw new Crash(); // memory lost: effect and entry both
        this.disk = { ...this.disk, count: this.count, table: this.table.save() };
        if (where === 'after-persist') throw new Crash(); // durable, but the reply is lost
        reply = u32(this.count);
      } else if (found.status === 'done') reply = found.reply;
      else throw new Error('no concurrency in this simulation');
    } catch (err) {
      if (err instanceof Crash || !(err instanceof RpcError)) throw err;
      const header = encodeResponseHeader({
        requestId: h.requestId,
        epoch,
        status: RpcStatus.Rejected,
        errorCode: err.code,
        errorMessage: '',
        payloadLength: 0,
      });
      return header;
    }
    const header = encodeResponseHeader({
      requestId: h.requestId,
      epoch,
      status: RpcStatus.Ok,
      errorCode: '',
      errorMessage: '',
      payloadLength: reply.length,
    });
    const out = new Uint8Array(header.length + reply.length);
    out.set(header);
    out.set(reply, header.length);
    return out;
  }
}

function simulate(seed: number, calls: number, dropP: number, crashP: number) {
  const rnd = prng(seed);
  const server = new CounterServer(() => {
    if (rnd() >= crashP) return 'none';
    const r = rnd();
    return r < 1 / 3 ? 'before' : r < 2 / 3 ? 'after-apply' : 'after-persist';
  });
  server.boot();
  // Session set-up over the (authenticated) handshake.
  const issued = server.authority.issue();
  server.table.openSession(issued.sessionId);
  server.disk = { ...server.disk, table: server.table.save() };
  const session = new SessionStateMachine();
  session.connected(issued.epoch, issued.sessionId);
  let serverEpoch = issued.epoch;
  const seen: number[] = [];
  let lateReply: { epoch: number; bytes: Uint8Array } | undefined;
  let crashes = 0;

  const reconnect = () => {
    server.boot();
    crashes++;
    session.lost(new Error('connection closed'));
    // Resumption over the control connection: challenge, proof, the next epoch.
    const c = server.authority.challenge(issued.sessionId);
    const proof = resumptionProof(issued.token, issued.sessionId, c);
    const r = server.authority.resume(issued.sessionId, c, proof, session.epoch);
    serverEpoch = r.epoch;
    session.connected(r.epoch);
  };

  const sequencer = new CallSequencer({ maxInFlight: 8 });
  for (let call = 0; call < calls; call++) {
    const seq = sequencer.next();
    for (let attempt = 1; ; attempt++) {
      expect(attempt).toBeLessThan(1000);
      // A reply of an older epoch turning up late is dropped, never taken for this call's.
      if (lateReply !== undefined && rnd() < 0.5) {
        expect(session.epochs.accept(lateReply.epoch)).toBe(lateReply.epoch === session.epoch);
        lateReply = undefined;
      }
      const request = encodeRequestHeader({
        requestId: seq * 1000 + attempt,
        sessionSeq: seq,
        ackBelow: sequencer.ackBelow, // every reply below it was received
        epoch: session.epoch,
        idempotent: false,
        deadlineMs: 1000,
        method: 'counter.increment',
        payloadLength: 0,
      });
      if (rnd() < dropP) continue; // request lost: retry
      let response: Uint8Array;
      try {
        response = server.handle(issued.sessionId, serverEpoch, request);
      } catch (err) {
        if (!(err instanceof Crash)) throw err;
        reconnect();
        continue;
      }
      if (rnd() < dropP) {
        if (rnd() < 0.5) lateReply = { epoch: serverEpoch, bytes: response };
        continue; // reply lost (or delayed): retry the same sequence
      }
      const f = decodeRpcFrame(response);
      if (f.kind !== 'response') throw new Error('unexpected frame');
      if (!session.epochs.accept(f.header.epoch)) continue;
      expect(f.header.status).toBe(RpcStatus.Ok);
      seen.push(readU32(f.payload));
      sequencer.settle(seq);
      break;
    }
  }
  server.boot(); // a last restart: what is durable
  return { seen, count: server.count, crashes, dropped: session.epochs.stats() };
}

describe('exactly once over a lossy link and a crashing server', () => {
  it('the count equals the increments and every reply value is seen once, in order', () => {
    let totalCrashes = 0;
    fc.assert(
      fc.property(
        fc.integer(),
        fc.integer({ min: 1, max: 60 }),
        fc.double({ min: 0, max: 0.5, noNaN: true }),
        fc.double({ min: 0, max: 0.3, noNaN: true }),
        (seed, calls, dropP, crashP) => {
          const r = simulate(seed, calls, dropP, crashP);
          totalCrashes += r.crashes;
          expect(r.seen).toEqual(Array.from({ length: calls }, (_, i) => i + 1));
          expect(r.count).toBe(calls);
        },
      ),
      { numRuns: 200 },
    );
    expect(totalCrashes).toBeGreaterThan(100); // the faults really happened
  });
});
