import net from 'node:net';
import { fromProtectionDomain, type RegisteredAllocator } from '@rdmajs/allocator';
import { allocCompletions, openDevice, type WorkCompletion } from '@rdmajs/verbs';
import { Handshake, type SessionKeys, socketHandshake } from '../../src/index.js';
import { ControlLink } from '../../src/internal/ControlLink.js';
import { establish } from '../../src/internal/establish.js';
import { PeerResources } from '../../src/internal/PeerResources.js';
import { ReceivePool } from '../../src/internal/ReceivePool.js';
import { encodeWireHeader, WIRE_HEADER_BYTES, WireType } from '../../src/internal/WireHeader.js';

/**
 * A peer that holds the secret and speaks mux's wire by hand (its own QPs, its own memory),
 * so tests can post what a real RdmaConnection never would: READs outside an offered block,
 * WRITEs, Done for nothing.
 */
export interface RoguePeer {
  readonly resources: PeerResources;
  readonly link: ControlLink;
  readonly alloc: RegisteredAllocator;
  /** The next completion of its CQ (polled every 2 ms; bounded by the caller's test timeout). */
  next(): Promise<WorkCompletion>;
  /** Opens channel `id` (odd: client side). */
  open(id: number): Promise<void>;
  /** Opens every channel of `ids` in one post, heeding no credit (unsignaled but the last). */
  openMany(ids: readonly number[]): void;
  close(): void;
}

export async function roguePeer(port: number, secret: string): Promise<RoguePeer> {
  const dev = openDevice({ provider: 'soft' });
  const pd = dev.allocPd();
  const alloc = fromProtectionDomain(pd, { arenaBytes: 4 << 20 });
  const socket = net.connect({ port, host: '127.0.0.1' });
  await new Promise<void>((r) => socket.once('connect', () => r()));
  const limits = { maxFrameBytes: 16 << 20, windowBytes: 64 << 20, windowMessages: 65536 };
  const hs = new Handshake({ role: 'client', secret, limits, transport: 'rdma' });
  const leftover = await socketHandshake(socket, hs, 10_000, undefined);
  const link = new ControlLink(socket, leftover, hs.sessionKeys as SessionKeys);
  const recvBytes = WIRE_HEADER_BYTES + 8192;
  const flow = {
    version: 1,
    receiveCredits: 16,
    reservedCredits: 1,
    returnThreshold: 4,
    windowBytes: 64 << 20,
    windowMessages: 65536,
    maxMessageBytes: 8192,
  };
  const pool = new ReceivePool(pd, alloc, recvBytes, 256, 16);
  const { resources } = await establish(
    link,
    'client',
    { recvBufferBytes: recvBytes, recvBufferCount: 16, flow, ablations: 0, incarnation: 1n },
    (n) => new PeerResources(dev, pd, alloc, pool, n, 16, 16),
    2, // one channel QP (qps[0], the rogue's) and the read QP
    10_000,
    undefined,
  );
  const wcs = allocCompletions(16);
  const next = async (): Promise<WorkCompletion> => {
    for (;;) {
      if (resources.cq.poll(wcs, 1) === 1) return { ...(wcs[0] as WorkCompletion) };
      await new Promise((r) => setTimeout(r, 2));
    }
  };
  const slot = alloc.alloc(256);
  return {
    resources,
    link,
    alloc,
    next,
    async open(id: number) {
      encodeWireHeader(slot.bytes, WireType.Open, id, 0, 0);
      const qp = resources.qps[0];
      if (qp === undefined) throw new Error('no qp');
      qp.postSend({ wrId: 1_000_000, opcode: 'SEND', sgList: [slot.sge(0, WIRE_HEADER_BYTES)] });
      const wc = await next();
      if (wc.status !== 'SUCCESS') throw new Error(`open: ${wc.status}`);
    },
    openMany(ids: readonly number[]) {
      const qp = resources.qps[0];
      if (qp === undefined) throw new Error('no qp');
      const wrs = ids.map((id, i) => {
        const b = alloc.alloc(WIRE_HEADER_BYTES);
        encodeWireHeader(b.bytes, WireType.Open, id, 0, 0);
        return {
          wrId: 2_000_000 + i,
          opcode: 'SEND' as const,
          sgList: [b.sge(0, WIRE_HEADER_BYTES)],
          signaled: i === ids.length - 1,
        };
      });
      qp.postSend(wrs);
    },
    close() {
      resources.close();
      pool.close();
      link.destroy();
      alloc.destroy();
      dev.close();
    },
  };
}
