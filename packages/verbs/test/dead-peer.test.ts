// Issue 10, failure detection: with default connect() options a peer process killed with
// SIGKILL is detected — a SEND to it completes with RETRY_EXC_ERR (the rest flushed) within
// DEAD_PEER_BOUND_MS. The deadline asserted here is far looser than the bound (the machine
// is shared): the point is that the failure arrives at all, with the defaults.
import { afterEach, describe, expect, it } from 'vitest';
import { type Endpoint, openDevice, type ProviderName } from '../src/index.js';
import { type ChildPeer, spawnPeer } from './harness/child.js';
import { collect, providers, type Side, side, sideOn } from './harness/pair.js';

const GENEROUS_MS = 10_000;

const paths: [ProviderName, 'shm' | 'tcp'][] = providers.flatMap(
  (p): [ProviderName, 'shm' | 'tcp'][] =>
    p === 'soft'
      ? [
          [p, 'shm'],
          [p, 'tcp'],
        ]
      : [[p, 'shm']],
);

describe.each(paths)('a dead peer on %s (%s), default options', (provider, path) => {
  let peer: ChildPeer | undefined;
  let me: Side | undefined;
  afterEach(async () => {
    await peer?.kill();
    me?.dev.close();
    peer = me = undefined;
  });

  async function connected(): Promise<{ m: Side; p: ChildPeer }> {
    const p = await spawnPeer();
    peer = p;
    if (path === 'tcp') {
      const dev = openDevice({ provider, link: 'tcp' });
      await dev.listen();
      me = sideOn(dev);
    } else {
      me = side(provider);
    }
    const remote = await p.call<{ endpoint: Endpoint }>('setup', {
      provider,
      ...(path === 'tcp' ? { link: 'tcp' } : {}),
    });
    me.qp.connect(remote.endpoint); // defaults: what recovery relies on
    await p.call('connect', { endpoint: me.qp.endpoint() });
    // The connection works before the kill.
    await p.call('postRecv', { count: 1, length: 64 });
    me.qp.postSend({ wrId: 100, opcode: 'SEND', sgList: [me.mr.sge(0, 8)] });
    expect((await collect(me.cq, 1, GENEROUS_MS))[0]?.status).toBe('SUCCESS');
    return { m: me, p };
  }

  it('dead_peer_send_after_kill_fails_with_retry_exceeded', async () => {
    const { m, p } = await connected();
    await p.kill();
    m.qp.postSend([
      { wrId: 1, opcode: 'SEND', sgList: [m.mr.sge(0, 8)] },
      { wrId: 2, opcode: 'RDMA_WRITE', sgList: [m.mr.sge(0, 8)], remoteAddr: 0, rkey: 1 },
    ]);
    const wcs = await collect(m.cq, 2, GENEROUS_MS);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'RETRY_EXC_ERR'],
      [2, 'WR_FLUSH_ERR'],
    ]);
    expect(m.qp.state).toBe('error');
  });
});
