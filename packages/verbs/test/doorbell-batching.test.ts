// Doorbells and wake-ups between processes. Soft holds the doorbells a JS job's posts ring
// until that job (and its microtasks) is over, once per peer: a batch lands whole and costs
// the sleeping receiver one wake-up. None may be lost on the way: not with producers racing
// the receiver's arm-and-sleep, not for a wait inside the job that posted, not when the
// process exits right after posting.
import { afterEach, describe, expect, it } from 'vitest';
import {
  allocCompletions,
  type CompletionQueue,
  type Endpoint,
  openDevice,
  type WorkCompletion,
} from '../src/index.js';
import { type ChildPeer, spawnPeer } from './harness/child.js';
import { ALL, providers, type Side, side, sleep } from './harness/pair.js';

interface Watched {
  events: number;
  pendingAtEvent: number[];
  reaped: number;
}

/** Waits for `n` RECV completions, sleeping on the CQ event only (no spin): a lost wake-up fails. */
async function receiveAll(cq: CompletionQueue, n: number): Promise<number> {
  const wcs = allocCompletions(64);
  let got = 0;
  while (got < n) {
    const k = cq.poll(wcs);
    for (let i = 0; i < k; i++) {
      const wc = wcs[i] as WorkCompletion;
      if (wc.status !== 'SUCCESS') throw new Error(`completion failed: ${wc.status}`);
      if (wc.opcode === 'RECV') got++;
    }
    if (k === 0) {
      await cq.waitForCompletion({ spinUs: 0, timeoutMs: 10_000 }).catch((err: Error) => {
        throw new Error(`no wake-up with ${got} of ${n} received: ${err.message}`);
      });
    }
  }
  return got;
}

describe.each(providers)('wake-ups between processes on %s', (provider) => {
  const peers: ChildPeer[] = [];
  let me: Side | undefined;
  afterEach(async () => {
    await Promise.all(peers.map((p) => p.kill()));
    peers.length = 0;
    me?.dev.close();
    me = undefined;
  });

  async function child(): Promise<{ peer: ChildPeer; endpoint: Endpoint }> {
    const peer = await spawnPeer();
    peers.push(peer);
    const r = await peer.call<{ endpoint: Endpoint }>('setup', { provider });
    return { peer, endpoint: r.endpoint };
  }

  it.skipIf(provider !== 'soft')(
    'SENDs posted one by one in one job wake the sleeping receiver once, all of them there',
    async () => {
      const { peer, endpoint } = await child();
      me = side(provider);
      me.qp.connect(endpoint);
      await peer.call('connect', { endpoint: me.qp.endpoint() });
      await peer.call('postRecv', { count: 16, length: 8 });
      await peer.call('watch');
      // Sixteen posts, each its own call: the receiver's arm is used up by the first, and its
      // doorbell rings once the job is over, with all sixteen in its CQ.
      for (let i = 0; i < 16; i++)
        me.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [me.mr.sge(0, 8)] });
      let w: Watched = { events: 0, pendingAtEvent: [], reaped: 0 };
      for (let i = 0; i < 1000 && w.reaped < 16; i++) {
        w = await peer.call<Watched>('watched');
        if (w.reaped < 16) await sleep(10);
      }
      expect(w).toEqual({ events: 1, pendingAtEvent: [16], reaped: 16 });
    },
  );

  it('a job that waits synchronously for the answer to its post gets it', async () => {
    const { peer, endpoint } = await child();
    me = side(provider);
    const m = me;
    m.qp.connect(endpoint);
    await peer.call('connect', { endpoint: m.qp.endpoint() });
    m.qp.postRecv({ wrId: 9, sgList: [m.mr.sge(4096, 8)] });
    // The peer echoes, asleep on its CQ event (no spin) by the time the SEND comes.
    const echoed = peer.call('echo', { count: 1, length: 8, spinUs: 0 });
    await sleep(100);
    m.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [m.mr.sge(0, 8)] });
    // No return to the event loop until the answer is here (bounded): the peer's doorbell
    // must not wait for the end of this job.
    const wcs = allocCompletions(4);
    const deadline = Date.now() + 10_000;
    let answered = false;
    while (!answered && Date.now() < deadline) {
      const n = m.cq.poll(wcs);
      for (let i = 0; i < n; i++) if (wcs[i]?.opcode === 'RECV') answered = true;
    }
    expect(answered).toBe(true);
    await echoed;
  });

  it('a SEND posted right before process.exit() still wakes its receiver', async () => {
    const { peer, endpoint } = await child();
    me = side(provider);
    me.qp.connect(endpoint);
    await peer.call('connect', { endpoint: me.qp.endpoint() });
    me.qp.postRecv({ wrId: 3, sgList: [me.mr.sge(0, 8)] });
    const exited = new Promise((r) => peer.proc.once('exit', r));
    const woken = me.cq.waitForCompletion({ spinUs: 0, timeoutMs: 10_000 });
    peer.proc.send({ id: 0, op: 'send-exit' });
    await woken;
    await exited;
    expect(me.cq.pending()).toBe(1);
  });

  it('producers racing the receiver arming and sleeping: every message wakes it, none is stranded', async () => {
    const PRODUCERS = 3;
    const EACH = 1500;
    const dev = openDevice({ provider });
    const pd = dev.allocPd();
    const cq = dev.createCq({ capacity: 8192 });
    const mr = pd.allocMr(1 << 16, ALL);
    me = { dev, pd, cq, mr, qp: pd.createQp({ sendCq: cq, recvCq: cq }) };
    const kids = await Promise.all(Array.from({ length: PRODUCERS }, () => child()));
    for (const k of kids) {
      const qp = pd.createQp({ sendCq: cq, recvCq: cq, maxRecvWr: EACH });
      qp.connect(k.endpoint);
      await k.peer.call('connect', { endpoint: qp.endpoint() });
      qp.postRecv(
        Array.from({ length: EACH }, (_, i) => ({ wrId: i, sgList: [mr.sge((i % 64) * 8, 8)] })),
      );
    }
    const sent = kids.map((k, i) =>
      k.peer.call<number>('burst', { count: EACH, seed: 0x9e3779b9 + i * 7919 }, 60_000),
    );
    expect(await receiveAll(cq, PRODUCERS * EACH)).toBe(PRODUCERS * EACH);
    expect(await Promise.all(sent)).toEqual(Array(PRODUCERS).fill(EACH));
  });
});
