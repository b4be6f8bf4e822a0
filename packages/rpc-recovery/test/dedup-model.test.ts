import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type DedupBegin,
  DeduplicationTable,
  type DeduplicationTableOptions,
  RpcDecodeError,
  RpcError,
} from '../src/index.js';

/*
 * The de-duplication table against a reference model, under random sequences of requests,
 * duplicates, completions, abandons, acknowledgements, evictions, closes, saves, restores
 * (also into a fresh table after a "crash", and from corrupted bytes).
 *
 * The model is a service whose state is the set of executed requests with their replies. It
 * is persisted together with the table at every save and rolled back with it at a restore,
 * as a real service does. Invariants checked after every step:
 * - at most once: a request the table calls 'new' was never executed in the service's state;
 * - a stored reply is byte for byte the reply of the one execution;
 * - every refusal is a typed RpcError whose code the model allows at that point;
 * - exactly once when the client saw success: with bounds that nothing reaches, every retry
 *   of an executed, unacknowledged request gets its stored reply.
 */

type Op =
  | { op: 'open' }
  | {
      op: 'request';
      s: number;
      delta: number;
      ack: number | null;
      finish: boolean;
      reply: Uint8Array;
    }
  | { op: 'complete'; r: number; reply: Uint8Array }
  | { op: 'abandon'; r: number }
  | { op: 'ack'; s: number; delta: number }
  | { op: 'evict'; s: number }
  | { op: 'close'; s: number }
  | { op: 'save' }
  | { op: 'restore'; snap: number; crash: boolean; damage: number | null; at: number };

interface ModelSession {
  id: string;
  state: 'open' | 'closed' | 'evicted' | 'forgotten';
  floor: number;
  next: number;
}

interface Snapshot {
  bytes: Uint8Array;
  executed: Map<string, Uint8Array>;
  sessions: ModelSession[];
}

const key = (id: string, seq: number): string => `${id}#${seq}`;

function opArb(replyMax: number): fc.Arbitrary<Op> {
  const reply = fc.uint8Array({ maxLength: replyMax });
  const idx = fc.nat(15);
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant<Op>({ op: 'open' }) },
    {
      weight: 8,
      arbitrary: fc.record({
        op: fc.constant('request' as const),
        s: idx,
        delta: fc.integer({ min: -5, max: 0 }),
        ack: fc.option(fc.integer({ min: -4, max: 1 }), { nil: null }),
        finish: fc.boolean(),
        reply,
      }),
    },
    { weight: 3, arbitrary: fc.record({ op: fc.constant('complete' as const), r: idx, reply }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('abandon' as const), r: idx }) },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant('ack' as const),
        s: idx,
        delta: fc.integer({ min: -4, max: 1 }),
      }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('evict' as const), s: idx }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('close' as const), s: idx }) },
    { weight: 1, arbitrary: fc.constant<Op>({ op: 'save' }) },
    {
      weight: 1,
      arbitrary: fc.record({
        op: fc.constant('restore' as const),
        snap: idx,
        crash: fc.boolean(),
        damage: fc.option(fc.nat(255), { nil: null }),
        at: fc.nat(),
      }),
    },
  );
}

/** Bounds nothing in a run can reach: no reply is dropped, no session evicted. */
const LOOSE: DeduplicationTableOptions = {
  maxSessions: 64,
  maxEntriesPerSession: 4096,
  maxBytesPerSession: 1 << 20,
  maxTotalEntries: 1 << 16,
  maxTotalBytes: 1 << 24,
  maxReplyBytes: 1024,
};

const tightArb: fc.Arbitrary<DeduplicationTableOptions> = fc
  .record({
    maxSessions: fc.integer({ min: 1, max: 3 }),
    maxEntriesPerSession: fc.integer({ min: 1, max: 4 }),
    extraEntries: fc.nat(4),
    maxBytesPerSession: fc.nat(24),
    extraBytes: fc.nat(24),
    maxReplyBytes: fc.nat(16),
  })
  .map((t) => ({
    maxSessions: t.maxSessions,
    maxEntriesPerSession: t.maxEntriesPerSession,
    maxTotalEntries: t.maxEntriesPerSession + t.extraEntries,
    maxBytesPerSession: t.maxBytesPerSession,
    maxTotalBytes: t.maxBytesPerSession + t.extraBytes,
    maxReplyBytes: t.maxReplyBytes,
  }));

async function runModel(options: DeduplicationTableOptions, ops: Op[], strict: boolean) {
  const evictions: string[] = [];
  const make = () => new DeduplicationTable({ ...options, onEvict: (id) => evictions.push(id) });
  let table = make();
  let generation = 0;
  let executed = new Map<string, Uint8Array>();
  let sessions: ModelSession[] = [];
  let running: { s: ModelSession; seq: number }[] = [];
  const snapshots: Snapshot[] = [];
  const waits: { gen: number; k: string; p: Promise<Uint8Array>; expected?: Uint8Array }[] = [];
  let opened = 0;
  let executions = 0;

  const pick = <T>(a: readonly T[], i: number): T | undefined =>
    a.length === 0 ? undefined : a[i % a.length];

  /** Sessions the table evicted since the last step: the model learns its eviction choices. */
  const syncEvictions = (current?: ModelSession) => {
    for (const id of evictions.splice(0)) {
      if (strict) throw new Error(`loose bounds but session ${id} was evicted`);
      const s = sessions.find((m) => m.id === id) as ModelSession;
      expect(s).toBeDefined();
      expect(s.state).toBe('open');
      expect(s).not.toBe(current);
      s.state = 'evicted';
      running = running.filter((r) => r.s !== s);
    }
  };

  const entriesOf = (s: ModelSession): number => {
    let n = running.filter((r) => r.s === s).length;
    for (const k of executed.keys()) {
      const [id, seq] = k.split('#') as [string, string];
      if (id === s.id && Number(seq) >= s.floor) n++;
    }
    return n;
  };

  const expectRefusal = (err: unknown, allowed: readonly string[]) => {
    expect(err).toBeInstanceOf(RpcError);
    expect(allowed).toContain((err as RpcError).code);
  };

  const sessionGoneCode = (s: ModelSession): string =>
    s.state === 'evicted' ? 'ERR_RPC_SESSION_EVICTED' : 'ERR_RPC_SESSION_UNKNOWN';

  const doComplete = (i: number, reply: Uint8Array) => {
    const r = running[i] as { s: ModelSession; seq: number };
    running.splice(i, 1);
    const k = key(r.s.id, r.seq);
    // The service applies the request: at most once in its (persisted) state.
    expect(executed.has(k)).toBe(false);
    executed.set(k, reply.slice());
    executions++;
    const given = reply.slice();
    table.complete(r.s.id, r.seq, given);
    for (const w of waits) if (w.gen === generation && w.k === k) w.expected ??= reply.slice();
    given.fill(0xee); // the table must have copied it
  };

  for (const o of ops) {
    switch (o.op) {
      case 'open': {
        const s: ModelSession = { id: `s${opened++}`, state: 'open', floor: 0, next: 0 };
        const openCount = sessions.filter((m) => m.state === 'open').length;
        table.openSession(s.id);
        sessions.push(s);
        if (evictions.length > 0) expect(openCount).toBe(options.maxSessions);
        syncEvictions(s);
        break;
      }
      case 'request': {
        const s = pick(sessions, o.s);
        if (s === undefined) break;
        const seq = Math.max(0, s.next + o.delta);
        const ackBelow = o.ack === null ? undefined : Math.max(0, s.next + o.ack);
        const k = key(s.id, seq);
        const wasExecuted = executed.has(k);
        let got: DedupBegin;
        try {
          got = table.begin(s.id, seq, ackBelow);
        } catch (err) {
          if (s.state !== 'open') {
            expectRefusal(err, [sessionGoneCode(s)]);
            break;
          }
          if (ackBelow !== undefined && ackBelow > s.floor) s.floor = ackBelow;
          const code = (err as RpcError).code;
          expect(err).toBeInstanceOf(RpcError);
          if (code === 'ERR_RPC_DEDUP_EXPIRED') expect(seq).toBeLessThan(s.floor);
          else if (code === 'ERR_RPC_DEDUP_REPLY_DROPPED') {
            expect(strict).toBe(false);
            expect(executed.has(k)).toBe(true);
            expect(seq).toBeGreaterThanOrEqual(s.floor);
          } else if (code === 'ERR_RPC_DEDUP_SESSION_FULL') {
            expect(entriesOf(s)).toBeGreaterThanOrEqual(options.maxEntriesPerSession as number);
            expect(executed.has(k) || running.some((r) => r.s === s && r.seq === seq)).toBe(false);
            expect((err as RpcError).retryable).toBe(true);
          } else throw err;
          break;
        }
        expect(s.state).toBe('open');
        if (ackBelow !== undefined && ackBelow > s.floor) s.floor = ackBelow;
        expect(seq).toBeGreaterThanOrEqual(s.floor);
        syncEvictions(s);
        if (got.status === 'new') {
          expect(executed.has(k)).toBe(false);
          expect(running.some((r) => r.s === s && r.seq === seq)).toBe(false);
          expect(entriesOf(s)).toBeLessThan(options.maxEntriesPerSession as number);
          s.next = Math.max(s.next, seq + 1);
          running.push({ s, seq });
          if (o.finish) {
            doComplete(running.length - 1, o.reply);
            syncEvictions(s);
          }
        } else if (got.status === 'done') {
          expect(got.reply).toEqual(executed.get(k));
        } else {
          expect(running.some((r) => r.s === s && r.seq === seq)).toBe(true);
          waits.push({ gen: generation, k, p: got.reply });
        }
        // Exactly once: nothing is ever dropped under loose bounds, so an executed request
        // still above the floor is answered with its reply.
        if (strict && wasExecuted) expect(got.status).toBe('done');
        break;
      }
      case 'complete': {
        if (running.length === 0) break;
        const i = o.r % running.length;
        const s = (running[i] as { s: ModelSession }).s;
        doComplete(i, o.reply);
        syncEvictions(s);
        break;
      }
      case 'abandon': {
        const r = pick(running, o.r);
        if (r === undefined) break;
        running = running.filter((x) => x !== r);
        table.abandon(r.s.id, r.seq, new Error('nothing applied'));
        break;
      }
      case 'ack': {
        const s = pick(sessions, o.s);
        if (s === undefined) break;
        const below = Math.max(0, s.next + o.delta);
        if (s.state !== 'open') {
          expect(() => table.ack(s.id, below)).toThrow(RpcError);
          break;
        }
        table.ack(s.id, below);
        if (below > s.floor) s.floor = below;
        break;
      }
      case 'evict':
      case 'close': {
        const s = pick(sessions, o.s);
        if (s === undefined) break;
        const wasOpen = s.state === 'open';
        const done = o.op === 'evict' ? table.evictSession(s.id) : table.closeSession(s.id);
        expect(done).toBe(wasOpen);
        if (o.op === 'evict') evictions.splice(evictions.indexOf(s.id), wasOpen ? 1 : 0);
        if (wasOpen) {
          s.state = o.op === 'evict' ? 'evicted' : 'closed';
          running = running.filter((r) => r.s !== s);
        }
        break;
      }
      case 'save': {
        snapshots.push({
          bytes: table.save(),
          executed: new Map(executed),
          sessions: sessions.map((m) => ({ ...m })),
        });
        break;
      }
      case 'restore': {
        const snap = pick(snapshots, o.snap);
        if (snap === undefined) break;
        if (!o.crash && running.length > 0) {
          const before = table.save();
          expect(() => table.restore(snap.bytes)).toThrow(
            expect.objectContaining({ code: 'ERR_RPC_INVALID_STATE' }),
          );
          expect(table.save()).toEqual(before);
          break;
        }
        if (o.crash) {
          // The server process died: running requests applied nothing and are gone.
          table = make();
          generation++;
          running = [];
        }
        if (o.damage !== null) {
          const bad =
            o.damage % 2 === 0
              ? snap.bytes.subarray(0, o.at % snap.bytes.length)
              : snap.bytes.slice();
          if (o.damage % 2 === 1) {
            const at = o.at % bad.length;
            bad[at] = (bad[at] as number) ^ (1 + (o.damage >> 1));
          }
          const before = table.save();
          let thrown: unknown;
          try {
            table.restore(bad);
          } catch (err) {
            thrown = err;
          }
          expect(thrown).toBeInstanceOf(RpcDecodeError);
          expect((thrown as RpcDecodeError).code).toBe('ERR_RPC_DEDUP_CORRUPT');
          expect((thrown as RpcDecodeError).offset).toBeGreaterThanOrEqual(0);
          expect((thrown as RpcDecodeError).offset).toBeLessThanOrEqual(bad.length);
          expect(table.save()).toEqual(before);
        }
        table.restore(snap.bytes);
        executed = new Map(snap.executed);
        // Sessions return to their saved state; tombstones of evictions are not saved.
        const saved = new Map(snap.sessions.map((m) => [m.id, m]));
        sessions = sessions.map((m) => {
          const was = saved.get(m.id);
          if (was !== undefined && was.state === 'open') return { ...was };
          return { ...m, state: 'forgotten' };
        });
        running = [];
        expect(table.stats().running).toBe(0);
        break;
      }
    }
    // Bounds and the model's view after every step.
    const st = table.stats();
    expect(st.sessions).toBeLessThanOrEqual(options.maxSessions as number);
    expect(st.entries).toBeLessThanOrEqual(options.maxTotalEntries as number);
    expect(st.bytes).toBeLessThanOrEqual(options.maxTotalBytes as number);
    expect(st.running).toBe(running.length);
    for (const m of sessions) {
      expect(table.hasSession(m.id)).toBe(m.state === 'open');
      if (m.state === 'open') {
        expect(table.floorOf(m.id)).toBe(m.floor);
        const rs = table.resumeState(m.id);
        expect(rs.floor).toBe(m.floor);
        const done = [...executed.keys()]
          .filter((k) => k.startsWith(`${m.id}#`))
          .map((k) => Number(k.slice(m.id.length + 1)))
          .filter((q) => q >= m.floor)
          .sort((a, b) => a - b);
        expect(rs.done).toEqual(done);
        const run = running
          .filter((r) => r.s === m && r.seq >= m.floor)
          .map((r) => r.seq)
          .sort((a, b) => a - b);
        expect(rs.running).toEqual(run);
      } else {
        expect(() => table.resumeState(m.id)).toThrow(
          expect.objectContaining({ code: sessionGoneCode(m) }),
        );
      }
    }
  }

  // Settle what still runs, then every duplicate that shared a run of this table must get
  // that run's reply, or a typed error saying why not.
  while (running.length > 0) doComplete(0, new Uint8Array([executions & 0xff]));
  for (const w of waits) {
    if (w.gen !== generation) continue; // its server "crashed": never answered, as in life
    try {
      const reply = await w.p;
      expect(w.expected).toBeDefined();
      expect(reply).toEqual(w.expected);
    } catch (err) {
      expectRefusal(err, [
        'ERR_RPC_DEDUP_ABANDONED',
        'ERR_RPC_SESSION_UNKNOWN',
        'ERR_RPC_SESSION_EVICTED',
      ]);
    }
  }
}

describe('DeduplicationTable against a reference model', () => {
  it('at most once and exactly once when nothing is evicted (loose bounds)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb(8), { maxLength: 120 }), (ops) =>
        runModel(LOOSE, [{ op: 'open' }, ...ops], true),
      ),
      { numRuns: 300 },
    );
  });

  it('at most once and only typed refusals under tight bounds', async () => {
    await fc.assert(
      fc.asyncProperty(tightArb, fc.array(opArb(20), { maxLength: 120 }), (options, ops) =>
        runModel(options, [{ op: 'open' }, ...ops], false),
      ),
      { numRuns: 400 },
    );
  });
});
