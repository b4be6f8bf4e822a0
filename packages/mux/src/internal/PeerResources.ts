import type { Block, RegisteredAllocator } from '@rdmajs/allocator';
import type {
  CompletionQueue,
  Device,
  Endpoint,
  ProtectionDomain,
  QueuePair,
  Sge,
  SharedReceiveQueue,
} from '@rdmajs/verbs';
import { Access } from '@rdmajs/verbs';

/** Send work requests per QP (the software queue in front of it holds the rest). */
export const MAX_SEND_WR = 512;
export const MAX_SEND_SGE = 4;

/**
 * The verbs objects of one peer: a CQ for everything, an SRQ of registered receive buffers
 * (allocator blocks), the RC QP pool, and a pool of its own (`allocator.forPeer()`) for the
 * memory this peer may READ: mux's rendezvous copies and the application's blocks built for
 * this peer (`connection.allocator`). Its arenas hold nothing else, so every rkey the peer
 * is given reaches only memory meant for it.
 */
export class PeerResources {
  readonly cq: CompletionQueue;
  readonly srq: SharedReceiveQueue;
  readonly qps: QueuePair[] = [];
  readonly recvBlocks: Block[] = [];
  /** Receive buffers handed to the application (released by it, not by close()). */
  readonly recvHeld: Uint8Array;
  /** The peer's pool: the only memory whose keys it gets (see the class comment). */
  readonly rendezvous: RegisteredAllocator;
  /** One receive WR per buffer, built once (reposting allocates nothing). */
  readonly #recvWrs: { wrId: number; sgList: Sge[] }[] = [];
  #closed = false;

  constructor(
    readonly device: Device,
    readonly pd: ProtectionDomain,
    readonly allocator: RegisteredAllocator,
    qpCount: number,
    readonly recvCount: number,
    readonly recvBufferBytes: number,
    label?: string,
  ) {
    this.cq = device.createCq({ capacity: recvCount + qpCount * MAX_SEND_WR + 64 });
    try {
      this.srq = pd.createSrq({ maxWr: recvCount, maxSge: 1 });
      for (let i = 0; i < qpCount; i++) {
        this.qps.push(
          pd.createQp({
            sendCq: this.cq,
            recvCq: this.cq,
            srq: this.srq,
            maxSendWr: MAX_SEND_WR,
            maxSendSge: MAX_SEND_SGE,
          }),
        );
      }
      this.recvHeld = new Uint8Array(recvCount);
      for (let i = 0; i < recvCount; i++) {
        const b = allocator.alloc(recvBufferBytes);
        this.recvBlocks.push(b);
        this.#recvWrs.push({ wrId: i, sgList: [b.sge(0, recvBufferBytes)] });
      }
      // Posted before the peer learns of the QPs: its first SEND finds a buffer.
      for (let i = 0; i < recvCount; i++) this.postRecv(i);
      // Under the transport allocator's limit, closed with it at the latest.
      this.rendezvous = allocator.forPeer({
        arenaBytes: 4 << 20,
        defaultAccess: 'remote-read',
        ...(label === undefined ? {} : { label }),
      });
    } catch (err) {
      this.close();
      throw err;
    }
  }

  postRecv(i: number): void {
    this.srq.postRecv(this.#recvWrs[i] as { wrId: number; sgList: Sge[] });
  }

  endpoints(): Record<string, unknown>[] {
    return this.qps.map((qp) => qp.endpoint() as unknown as Record<string, unknown>);
  }

  /**
   * RC connect of every QP; rnrRetry 0: a SEND without a posted buffer fails at once. The
   * peer may only READ through them (mux posts SEND and RDMA_READ, never WRITE or atomics).
   */
  connect(remote: readonly Record<string, unknown>[]): void {
    for (const [i, qp] of this.qps.entries()) {
      qp.connect(remote[i] as unknown as Endpoint, { rnrRetry: 0, access: Access.RemoteRead });
    }
  }

  /** QPs first (nothing touches memory after), then buffers, SRQ, CQ, the rendezvous pool. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const qp of this.qps) safe(() => qp.close());
    if (this.srq !== undefined) safe(() => this.srq.close());
    for (const [i, b] of this.recvBlocks.entries()) {
      if (this.recvHeld?.[i] !== 1 && !b.released) safe(() => b.release());
    }
    safe(() => this.cq.close());
    if (this.rendezvous !== undefined) safe(() => this.rendezvous.close());
  }
}

function safe(f: () => void): void {
  try {
    f();
  } catch {
    // Teardown goes on: a parent closing later takes what is left.
  }
}
