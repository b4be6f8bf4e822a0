// A SEND ping-pong between two processes on the soft provider, written only against the
// published API of @rdmajs/verbs (run from a project that installed the tarballs).
// Parent: `node pingpong.mjs [rounds]`; it forks itself as the echoing child.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { Access, allocCompletions, openDevice } from '@rdmajs/verbs';

const SIZE = 4096;
const ROUNDS = Number(process.argv[2] ?? 100);
const child = process.argv[3] === '--child';

function side() {
  const dev = openDevice({ provider: 'soft' });
  const pd = dev.allocPd();
  const cq = dev.createCq({ capacity: 64 });
  const mr = pd.allocMr(2 * SIZE, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead);
  const qp = pd.createQp({ sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
  return { dev, cq, mr, qp, wcs: allocCompletions(8) };
}

/**
 * Waits for one successful SEND and one RECV completion, in whichever order they come
 * (a shared CQ does not order the two); returns the RECV one's length.
 */
async function exchange(s) {
  let sent = false;
  let received;
  while (!sent || received === undefined) {
    const n = s.cq.poll(s.wcs);
    for (let i = 0; i < n; i++) {
      const wc = s.wcs[i];
      if (wc.status !== 'SUCCESS') throw new Error(`${wc.opcode} completed with ${wc.status}`);
      if (wc.opcode === 'SEND') sent = true;
      else if (wc.opcode === 'RECV') received = wc.byteLen;
    }
    if (n === 0) await s.cq.waitForCompletion({ timeoutMs: 10_000 });
  }
  return received;
}

/** The first RECV: nothing of ours is in flight yet. */
async function firstRecv(s) {
  for (;;) {
    if (s.cq.poll(s.wcs, 1) === 1) {
      const wc = s.wcs[0];
      if (wc.status !== 'SUCCESS' || wc.opcode !== 'RECV')
        throw new Error(`${wc.opcode} ${wc.status}`);
      return wc.byteLen;
    }
    await s.cq.waitForCompletion({ timeoutMs: 10_000 });
  }
}

const recv = (s) => s.qp.postRecv({ wrId: 1, sgList: [s.mr.sge(SIZE, SIZE)] });
const send = (s, len) => s.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [s.mr.sge(0, len)] });

async function echo(s) {
  let len = await firstRecv(s);
  for (let i = 0; i < ROUNDS; i++) {
    s.mr.bytes.copyWithin(0, SIZE, SIZE + len);
    recv(s);
    send(s, len);
    // The last echo still needs its own SEND completion; no RECV follows it.
    if (i === ROUNDS - 1) break;
    len = await exchange(s);
  }
  while (s.cq.poll(s.wcs, 1) === 0) await s.cq.waitForCompletion({ timeoutMs: 10_000 });
  if (s.wcs[0].status !== 'SUCCESS') throw new Error(`last echo: ${s.wcs[0].status}`);
}

async function ping(s) {
  for (let i = 0; i < ROUNDS; i++) {
    const len = 1 + ((i * 997) % SIZE);
    for (let b = 0; b < len; b++) s.mr.bytes[b] = (i + b) & 0xff;
    recv(s);
    send(s, len);
    const got = await exchange(s);
    if (got !== len) throw new Error(`round ${i}: echoed ${got} bytes, sent ${len}`);
    for (let b = 0; b < len; b++)
      if (s.mr.bytes[SIZE + b] !== ((i + b) & 0xff))
        throw new Error(`round ${i}: byte ${b} differs`);
  }
}

if (child) {
  const s = side();
  process.once('message', async (peer) => {
    s.qp.connect(peer);
    recv(s);
    process.send(s.qp.endpoint());
    await echo(s);
    s.dev.close();
    process.disconnect();
  });
  process.send('ready');
} else {
  const s = side();
  const peer = fork(new URL(import.meta.url), [String(ROUNDS), '--child']);
  const exited = once(peer, 'exit');
  await once(peer, 'message');
  peer.send(s.qp.endpoint());
  const [remote] = await once(peer, 'message');
  s.qp.connect(remote);
  await ping(s);
  const [code] = await exited;
  s.dev.close();
  if (code !== 0) throw new Error(`echo process exited with ${code}`);
  console.log(`pingpong: ${ROUNDS} SEND round trips between two processes on soft, bytes checked`);
}
