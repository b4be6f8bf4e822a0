import type { RegisteredAllocator } from '@rdmajs/allocator';
import type {
  CompletionQueue,
  Device,
  Endpoint,
  ProtectionDomain,
  QueuePair,
  WorkCompletion,
} from '@rdmajs/verbs';
import { Access, allocCompletions } from '@rdmajs/verbs';
import { type PoolUser, RECV_WR_ID_LIMIT, type ReceivePool } from './ReceivePool.js';

/** Send work requests per QP (the software queue in front of it holds the rest). */
export const MAX_SEND_WR = 512;
export const MAX_SEND_SGE = 4;
/** The IB rule: rnr_retry 7 means retry forever. */
const RNR_RETRY_FOREVER = 7;

/**
 * The verbs objects of one peer: a CQ for everything (its receive completions name buffers
 * of the transport's shared `ReceivePool`), the RC QP pool attached to that pool's SRQ, the
 * buffers leased from the pool for this peer's credits, and a pool of its own
 * (`allocator.forPeer()`) for the memory this peer may READ: mux's rendezvous copies and the
 * application's blocks built for this peer (`connection.allocator`). Its arenas hold nothing
 * else, so every rkey the peer is given reaches only memory meant for it.
 */
export class PeerResources {
  readonly cq: CompletionQueue;
  readonly qps: QueuePair[] = [];
  /** The peer's pool: the only memory whose keys it gets (see the class comment). */
  readonly rendezvous: RegisteredAllocator;
  /** Who handles this peer's receives (told of released buffers; set by the connection). */
  user: PoolUser | undefined;
  /** Buffers leased from the pool for this peer's credits, and the part above the initial grant. */
  #leased = 0;
  #extra = 0;
  #closed = false;

  constructor(
    readonly device: Device,
    readonly pd: ProtectionDomain,
    readonly allocator: RegisteredAllocator,
    readonly pool: ReceivePool,
    qpCount: number,
    /** The initial lease (credits granted at the handshake). */
    readonly initialLease: number,
    /** The most credits this side ever leases the peer (the CQ holds that many receives). */
    readonly maxLease: number,
    label?: string,
    /**
     * The 'credits' ablation: the peer's SENDs are not bounded by its lease, so they may take
     * any buffer the shared pool posts (the CQ holds that many receives), and a SEND that finds
     * none is retried by the NIC forever (rnrRetry 7) instead of failing.
     */
    readonly creditsOff = false,
  ) {
    const receives = creditsOff ? Math.max(maxLease, pool.maxBuffers) : maxLease;
    this.cq = device.createCq({ capacity: receives + qpCount * MAX_SEND_WR + 64 });
    try {
      // Posted before the peer learns of the QPs: its first SEND finds a buffer.
      pool.lease(initialLease);
      this.#leased = initialLease;
      for (let i = 0; i < qpCount; i++) {
        this.qps.push(
          pd.createQp({
            sendCq: this.cq,
            recvCq: this.cq,
            srq: pool.srq,
            maxSendWr: MAX_SEND_WR,
            maxSendSge: MAX_SEND_SGE,
          }),
        );
      }
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

  /** Buffers leased for this peer now. */
  get leased(): number {
    return this.#leased;
  }

  /** `n` more buffers for a busy peer, if the pool has them (false: nothing changed). */
  tryLeaseMore(n: number): boolean {
    if (this.#closed || this.#leased + n > this.maxLease) return false;
    if (!this.pool.tryLeaseExtra(n)) return false;
    this.#leased += n;
    this.#extra += n;
    return true;
  }

  /** The peer gave `n` credits of its grown lease back. */
  unlease(n: number): void {
    const extra = Math.min(n, this.#extra);
    this.#leased -= n;
    this.#extra -= extra;
    this.pool.unlease(n, extra);
  }

  endpoints(): Record<string, unknown>[] {
    return this.qps.map((qp) => qp.endpoint() as unknown as Record<string, unknown>);
  }

  /**
   * RC connect of every QP; rnrRetry 0: a SEND without a posted buffer fails at once (with
   * credits off: 7, retried forever every min RNR timer of the receiver, the verbs default).
   * The peer may only READ through them (mux posts SEND and RDMA_READ, never WRITE or atomics).
   */
  connect(remote: readonly Record<string, unknown>[]): void {
    const rnrRetry = this.creditsOff ? RNR_RETRY_FOREVER : 0;
    for (const [i, qp] of this.qps.entries()) {
      qp.connect(remote[i] as unknown as Endpoint, { rnrRetry, access: Access.RemoteRead });
    }
  }

  /**
   * QPs first (nothing is placed after), then the receives still in the CQ go back to the
   * pool with the buffers this peer's connection took, then the lease, the CQ and the
   * rendezvous pool. Buffers the application holds go back when it releases them.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const qp of this.qps) safe(() => qp.close());
    if (this.cq !== undefined) safe(() => this.#reclaim());
    if (this.user !== undefined) safe(() => this.pool.forget(this.user as PoolUser));
    this.pool.unlease(this.#leased, this.#extra);
    this.#leased = 0;
    this.#extra = 0;
    safe(() => this.cq.close());
    if (this.rendezvous !== undefined) safe(() => this.rendezvous.close());
  }

  /** Receives the connection never handled: their buffers are the pool's again. */
  #reclaim(): void {
    const wcs = allocCompletions(64);
    for (let n = this.cq.poll(wcs); n > 0; n = n === wcs.length ? this.cq.poll(wcs) : 0) {
      for (let i = 0; i < n; i++) this.reclaimReceive((wcs[i] as WorkCompletion).wrId);
    }
  }

  /** A receive completion (also a failed one) whose buffer nobody will handle. */
  reclaimReceive(wrId: number): void {
    if (wrId >= RECV_WR_ID_LIMIT) return;
    safe(() => this.pool.giveBack(this.pool.take(wrId)));
  }
}

function safe(f: () => void): void {
  try {
    f();
  } catch {
    // Teardown goes on: a parent closing later takes what is left.
  }
}
