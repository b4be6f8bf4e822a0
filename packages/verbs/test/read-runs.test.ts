// Soft READ runs (send.cc readRun: consecutive READs of one key carried out in one pass)
// must give exactly the completions, bytes and QP state of the per-WR path. The per-WR path
// is forced by an injected delay (a run is skipped while one is set). Runs between
// processes, and after the peer process died: cross-process.test.ts.
import { describe, expect, it } from 'vitest';
import {
  allocCompletions,
  type CompletionQueue,
  type MemoryRegion,
  SendWrList,
} from '../src/index.js';
import { injectFault } from '../src/testing.js';
import { collect, type Pair, pair, type Side, type SideOptions } from './harness/pair.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Every completion until at least `want` came and the CQ then stays empty for a while (the
 * per-WR path takes 1 ms per WR), bounded by 30 s: [wrId, status, byteLen].
 */
async function drain(cq: CompletionQueue, want: number): Promise<[number, string, number | '-'][]> {
  const out: [number, string, number | '-'][] = [];
  const wcs = allocCompletions(64);
  const until = Date.now() + 30_000;
  for (let idle = 0; idle < 40 && Date.now() < until; ) {
    const n = cq.poll(wcs);
    if (n === 0) {
      if (out.length < want) {
        await sleep(5);
        continue;
      }
      idle++;
      await sleep(5);
      continue;
    }
    idle = 0;
    for (let i = 0; i < n; i++) {
      const w = wcs[i] as (typeof wcs)[number];
      out.push([w.wrId, w.status, w.status === 'SUCCESS' ? w.byteLen : '-']);
    }
  }
  return out;
}

/**
 * Waits until the CQ's count stops moving (unchanged over 100 ms, bounded by 10 s), without
 * taking anything: the per-WR path's WRs then all ran, as the run's did at its post. Draining
 * while they still ran one per ms let a slow host (the rxe lane's VM) keep a small CQ from
 * overrunning there while the run's overran it.
 */
async function settled(cq: CompletionQueue): Promise<void> {
  const until = Date.now() + 10_000;
  let last = -1;
  for (let still = 0; still < 20 && Date.now() < until; ) {
    const n = cq.pending();
    still = n === last ? still + 1 : 0;
    last = n;
    await sleep(5);
  }
}

type Extra = { ro: MemoryRegion; b2: MemoryRegion };
type Build = (a: Side, b: Side, x: Extra) => SendWrList;
/** A scenario: its name, sides, list, and how many completions it makes at least. */
type Scenario = [string, SideOptions, Build, number];

/** One scenario's outcome, with READ runs (perWr false) or without. */
async function outcome(opts: SideOptions, build: Build, want: number, perWr: boolean) {
  const p: Pair = pair('soft', opts);
  const { a, b } = p;
  for (let i = 0; i < b.mr.length; i++) (b.mr.bytes as Uint8Array)[i] = (i * 13 + 7) & 255;
  const x = { ro: a.pd.allocMr(4096, 0), b2: b.pd.allocMr(8192, b.mr.access) };
  if (perWr) injectFault(a.qp, { type: 'delay', ms: 1 });
  const list = build(a, b, x);
  let thrown = '';
  try {
    a.qp.postSendList(list);
  } catch (e) {
    thrown = (e as { code: string }).code;
  }
  await settled(a.cq);
  const wcs = await drain(a.cq, want);
  const bytes = Array.from(a.mr.bytes as Uint8Array);
  const state = a.qp.state;
  p.close();
  return { thrown, wcs, state, bytes };
}

const scenarios: Scenario[] = [
  [
    'CQ overrun inside a run',
    { maxSendWr: 64, cqCapacity: 8, mrBytes: 65536 },
    (a, b) => {
      const l = new SendWrList(20);
      for (let i = 0; i < 20; i++) {
        l.addRead(a.mr.addr + i * 64, 32, a.mr.lkey, b.mr.addr + i * 100, b.mr.rkey);
        l.setWrId(i, i + 1);
        l.setSignaled(i, true);
      }
      return l;
    },
    1,
  ],
  [
    'mixed errors: zero length, another key, over 64 KiB, out of the region',
    { maxSendWr: 64, mrBytes: 1 << 18 },
    (a, b, x) => {
      const l = new SendWrList(12);
      const add = (la: number, len: number, lk: number, ra: number, rk: number) => {
        const i = l.addRead(la, len, lk, ra, rk);
        l.setWrId(i, i + 1);
        l.setSignaled(i, i % 2 === 0);
      };
      add(a.mr.addr, 16, a.mr.lkey, b.mr.addr, b.mr.rkey);
      add(a.mr.addr + 16, 0, a.mr.lkey, b.mr.addr, b.mr.rkey);
      add(a.mr.addr + 32, 16, a.mr.lkey, x.b2.addr, x.b2.rkey);
      add(a.mr.addr + 100, 70000, a.mr.lkey, b.mr.addr + 1000, b.mr.rkey);
      add(a.mr.addr + 80000, 16, a.mr.lkey, b.mr.addr + 5, b.mr.rkey);
      add(a.mr.addr + 80100, 16, a.mr.lkey, x.b2.addr + 8190, x.b2.rkey);
      add(a.mr.addr + 80200, 16, a.mr.lkey, b.mr.addr, b.mr.rkey);
      return l;
    },
    1,
  ],
  [
    'a zero-length READ with a bad key inside a run',
    { maxSendWr: 64, mrBytes: 65536 },
    (a, b) => {
      const l = new SendWrList(4);
      for (let i = 0; i < 4; i++) {
        const rkey = i === 1 ? 12345 : b.mr.rkey;
        l.addRead(a.mr.addr + i * 16, i === 1 ? 0 : 16, a.mr.lkey, b.mr.addr + i, rkey);
        l.setWrId(i, i + 1);
        l.setSignaled(i, true);
      }
      return l;
    },
    4,
  ],
  [
    'a read-only local region in the middle of a run',
    { maxSendWr: 64, mrBytes: 65536 },
    (a, b, x) => {
      const l = new SendWrList(5);
      for (let i = 0; i < 5; i++) {
        const into = i === 3 ? x.ro : a.mr;
        l.addRead(into.addr + i * 16, 16, into.lkey, b.mr.addr + i, b.mr.rkey);
        l.setWrId(i, i + 1);
        l.setSignaled(i, true);
      }
      return l;
    },
    4,
  ],
  [
    'past the run caps: 1100 READs (1024 per run) and 10 of 60000 bytes (256 KiB per run)',
    { maxSendWr: 2048, mrBytes: 1 << 20, cqCapacity: 64 },
    (a, b) => {
      const l = new SendWrList(1110);
      const L = 200;
      for (let i = 0; i < 1100; i++)
        l.addRead(
          a.mr.addr + i * 300,
          L,
          a.mr.lkey,
          b.mr.addr + ((i * 331) % (b.mr.length - L)),
          b.mr.rkey,
        );
      for (let i = 0; i < 10; i++)
        l.addRead(
          a.mr.addr + 900_000 + (i % 2) * 60_000,
          60_000,
          a.mr.lkey,
          b.mr.addr + i * 70_000,
          b.mr.rkey,
        );
      for (const i of [1023, 1024, 1099, 1104, 1109]) {
        l.setWrId(i, i + 1);
        l.setSignaled(i, true);
      }
      return l;
    },
    5,
  ],
];

describe('soft READ runs', () => {
  it.each(scenarios)(
    '%s: the same completions, bytes and state as the per-WR path',
    async (_, opts, build, want) => {
      const run = await outcome(opts, build, want, false);
      const perWr = await outcome(opts, build, want, true);
      expect(run.wcs.length).toBeGreaterThan(0);
      expect(run.thrown).toBe(perWr.thrown);
      expect(run.wcs).toEqual(perWr.wcs);
      expect(run.state).toBe(perWr.state);
      expect(run.bytes).toEqual(perWr.bytes);
    },
  );

  it('a run past both caps reads every byte', async () => {
    const p = pair('soft', { maxSendWr: 4096, mrBytes: 1 << 20, cqCapacity: 64 });
    const { a, b } = p;
    try {
      for (let i = 0; i < b.mr.length; i++) (b.mr.bytes as Uint8Array)[i] = (i * 13 + 7) & 255;
      const N = 3000;
      const L = 200;
      const list = new SendWrList(N);
      const off = (i: number) => (i * 331) % (b.mr.length - L);
      for (let i = 0; i < N; i++)
        list.addRead(a.mr.addr + i * 300, L, a.mr.lkey, b.mr.addr + off(i), b.mr.rkey);
      list.setWrId(N - 1, 77);
      list.setSignaled(N - 1, true);
      a.qp.postSendList(list);
      expect((await collect(a.cq, 1)).map((w) => [w.wrId, w.status])).toEqual([[77, 'SUCCESS']]);
      let bad = 0;
      for (let i = 0; i < N; i++) {
        const got = (a.mr.bytes as Uint8Array).subarray(i * 300, i * 300 + L);
        const want = (b.mr.bytes as Uint8Array).subarray(off(i), off(i) + L);
        if (!got.every((v, k) => v === want[k])) bad++;
      }
      expect(bad).toBe(0);
    } finally {
      p.close();
    }
  });
});
