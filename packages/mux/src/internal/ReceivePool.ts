import { AllocLimitError, type Block, type RegisteredAllocator } from '@rdmajs/allocator';
import {
  type ProtectionDomain,
  RdmaPostError,
  type RecvWr,
  type SharedReceiveQueue,
} from '@rdmajs/verbs';
import { MuxClosedError, MuxProtocolError } from '../errors.js';
import { InboundMessage, rearmInbound } from '../Message.js';
import { POST_LIST_MAX, PostLists } from './PostLists.js';
import { WIRE_HEADER_BYTES } from './WireHeader.js';

/**
 * Receive work requests carry their buffer's index, below this; send work requests count up
 * from it (RdmaConnection's lanes), so any completion, also a failed one (whose opcode verbs
 * leaves undefined), tells a receive buffer of the pool from a send. Small: ids in V8's small
 * integer range cost no heap number per completion.
 */
export const RECV_WR_ID_LIMIT = 1 << 16;

/**
 * A post of receive buffers that may go in later: the queue's lock is held by a peer process
 * that did not let go in time (ERR_RDMA_BUSY: nothing was posted) or the queue is full
 * (ERR_RDMA_QUEUE_FULL: `posted` went in). Any other failure is not retried.
 */
export function isTransientPostError(err: unknown): err is RdmaPostError {
  return err instanceof RdmaPostError && err.retryable;
}

/** The connection a buffer's arrival belongs to (told when the application releases it). */
export interface PoolUser {
  recvReleased(idx: number): void;
}

export interface ReceivePoolStats {
  /** Buffers registered for the pool. */
  readonly buffers: number;
  /** Buffers posted to the SRQ (empty, ready for any connection's peer). */
  readonly posted: number;
  /** Credits leased to the peers of every connection (the pool keeps at least this many). */
  readonly leased: number;
  /** The part of `leased` above the connections' initial grants (busy connections' growth). */
  readonly extraLeased: number;
  /** Buffers holding a message the application (or mux) has not released. */
  readonly held: number;
  /** The part of `held` whose connection ended (freed or reposted when released). */
  readonly orphans: number;
  readonly bufferBytes: number;
  /** Registered bytes of the pool's buffers (buffers × allocated size). */
  readonly registeredBytes: number;
  /** Most buffers the pool may hold (SRQ depth, registration limit). */
  readonly maxBuffers: number;
  /**
   * Arrivals that took the last posted buffer: until the next repost a SEND to any of the
   * transport's QPs finds none (RNR). With credits on no sender holds a credit then; with the
   * 'credits' ablation each SEND arriving meanwhile is NAKed and retried by the NIC.
   */
  readonly emptied: number;
}

const EMPTY = 0;
const POSTED = 1;
/** Consumed by an arrival, being handled by its connection. */
const TAKEN = 2;
/** Handed to the application as a message, until it releases it. */
const HELD = 3;
/** Held by the application after its connection ended (its lease is gone: it counts apart). */
const ORPHAN = 4;

/**
 * The receive buffers of every connection of a transport: one SRQ of the transport's PD that
 * the QPs of every connection attach to, and registered buffers (local-only blocks of the
 * transport's allocator: no remote key ever names them) posted to it.
 *
 * Credits stay exact: each connection leases buffers (`lease`) for its peer's credits, and
 * the pool keeps at least as many buffers as are leased (not counting those the application
 * still holds of ended connections), so the posted ones always cover every credit a peer
 * holds or has in flight (a buffer held by the application or whose credit is owed back is
 * one its peer cannot use: see flowctl's `peerCredits`). It grows in
 * blocks while leases grow, up to `maxBuffers` (the SRQ depth, the registration limit), and
 * shrinks as buffers come back: one that returns while the pool holds more than the leases
 * and their slack is freed instead of reposted. A buffer never consumed cannot be taken out
 * of an SRQ, so shrinking follows traffic.
 *
 * A receive completion's wrId names the buffer (its index); its connection
 * is the one whose CQ reported it (`take`).
 */
export class ReceivePool {
  readonly maxBuffers: number;
  readonly #pd: ProtectionDomain;
  #srq: SharedReceiveQueue | undefined;
  readonly #alloc: RegisteredAllocator;
  readonly #bufferBytes: number;
  /** Buffers a growth adds at least (fewer registrations), and what the pool keeps spare. */
  readonly #step: number;
  /** Extra leases (beyond the connections' initial grants) the pool grants in total. */
  readonly #maxExtra: number;
  readonly #blocks: (Block | undefined)[];
  readonly #wrs: (RecvWr | undefined)[];
  /** A batch of reposts (giveBackAll), filled by index, and its post lists. */
  readonly #repostWrs: (RecvWr | undefined)[];
  readonly #lists = new PostLists<RecvWr>();
  readonly #state: Uint8Array;
  readonly #owner: (PoolUser | undefined)[];
  /** Per buffer: its reusable message, the view of its last length, its window charge. */
  readonly #msgs: (InboundMessage | undefined)[];
  readonly #views: (Uint8Array | undefined)[];
  /** Small integers: a Float64Array's reads would box every charge into a heap number. */
  readonly charges: number[];
  /** Indices without a block (freed by a shrink), reused first. */
  readonly #free: number[] = [];
  #top = 0;
  #size = 0;
  #posted = 0;
  #emptied = 0;
  #held = 0;
  /** Held buffers of ended connections: no lease stands for them, so they do not cover one. */
  #orphans = 0;
  #leased = 0;
  #extra = 0;
  #closed = false;
  #lastDeferral: Error | undefined;

  constructor(
    pd: ProtectionDomain,
    allocator: RegisteredAllocator,
    bufferBytes: number,
    maxBuffers: number,
    step: number,
  ) {
    this.#pd = pd;
    this.#alloc = allocator;
    this.#bufferBytes = bufferBytes;
    this.maxBuffers = Math.min(maxBuffers, RECV_WR_ID_LIMIT);
    maxBuffers = this.maxBuffers;
    this.#step = step;
    this.#maxExtra = Math.floor(maxBuffers / 2);
    // Dense from the start: buffers come back in any order, and a sparse array's stores allocate.
    this.#blocks = new Array<Block | undefined>(maxBuffers).fill(undefined);
    this.#wrs = new Array<RecvWr | undefined>(maxBuffers).fill(undefined);
    this.#state = new Uint8Array(maxBuffers);
    this.#owner = new Array<PoolUser | undefined>(maxBuffers).fill(undefined);
    this.#msgs = new Array<InboundMessage | undefined>(maxBuffers).fill(undefined);
    this.#views = new Array<Uint8Array | undefined>(maxBuffers).fill(undefined);
    this.charges = new Array<number>(maxBuffers).fill(0);
    // As many as the pool has buffers: a batch never grows it (an allocation mid-traffic).
    this.#repostWrs = new Array<RecvWr | undefined>(maxBuffers).fill(undefined);
  }

  /** The SRQ every connection's QPs attach to (made by the first lease after an idle reset). */
  get srq(): SharedReceiveQueue {
    if (this.#srq === undefined) throw new MuxClosedError('receive pool: no lease');
    return this.#srq;
  }

  get bufferBytes(): number {
    return this.#bufferBytes;
  }

  get leased(): number {
    return this.#leased;
  }

  /**
   * Leases `n` buffers for a connection's initial grant: posted before the peer learns of
   * them. Throws ERR_ALLOC_LIMIT (the allocator's, or the SRQ depth's) when the pool cannot
   * hold them; nothing is leased then.
   */
  lease(n: number): void {
    this.#ensure(this.#leased + n);
    this.#leased += n;
  }

  /**
   * Leases `n` more buffers to a busy connection, if the pool can grow to them within its
   * share for growth (half of `maxBuffers`, so initial grants of new connections still fit).
   * False, with nothing changed, when it cannot.
   */
  tryLeaseExtra(n: number): boolean {
    if (this.#closed || this.#extra + n > this.#maxExtra) return false;
    try {
      this.#ensure(this.#leased + n);
    } catch {
      return false;
    }
    this.#leased += n;
    this.#extra += n;
    return true;
  }

  /** A connection gives back `n` leased buffers (`extra` of them from growth). */
  unlease(n: number, extra: number): void {
    this.#leased -= n;
    this.#extra -= extra;
    this.#maybeReset();
  }

  /**
   * No lease left: no connection's QP is on the SRQ any more (they close before their lease
   * goes), so the SRQ and its posted buffers go; the next lease makes a new one. This is how
   * an idle transport gives its receive memory back (an SRQ cannot give a posted buffer
   * back otherwise).
   */
  #maybeReset(): void {
    if (this.#leased !== 0 || this.#srq === undefined) return;
    try {
      this.#srq.close();
    } catch {
      return; // a QP still uses it (closing): the next unlease tries again
    }
    this.#srq = undefined;
    for (let i = 0; i < this.#top; i++) {
      if (this.#state[i] === POSTED) {
        this.#posted--;
        this.#drop(i);
      }
    }
    // Buffers the application still holds are freed when it releases them.
    if (this.#size === 0) {
      this.#free.length = 0;
      this.#top = 0;
    }
  }

  /** Grows to at least `need` buffers (and up to two steps of slack when it can). */
  #ensure(need: number): void {
    if (this.#closed) throw new MuxClosedError('receive pool');
    this.#srq ??= this.#pd.createSrq({ maxWr: this.maxBuffers, maxSge: 1 });
    // A step of slack beyond the leases: a peer's burst over its lease lands there until
    // its first arrival beyond the lease fails it (see RdmaConnection's receive).
    if (need + this.#step <= this.#size - this.#orphans) return;
    if (need + this.#orphans > this.maxBuffers) {
      throw new AllocLimitError(
        `receive pool: ${need} buffers leased, at most ${this.maxBuffers} (SRQ depth or maxRegisteredBytes)`,
        this.maxBuffers,
        need,
        true,
      );
    }
    const want = Math.min(this.maxBuffers, need + 2 * this.#step) + this.#orphans;
    try {
      while (this.#size < want) this.#add();
    } catch (err) {
      if (this.#size - this.#orphans < need) throw err;
    }
  }

  /** Registers one more buffer and posts it. */
  #add(): void {
    const idx = this.#free.pop() ?? this.#top;
    const block = this.#alloc.alloc(this.#bufferBytes, 'local');
    const wr = { wrId: idx, sgList: [block.sge(0, this.#bufferBytes)] };
    try {
      this.srq.postRecv(wr);
    } catch (err) {
      block.release();
      if (idx !== this.#top) this.#free.push(idx);
      throw err;
    }
    if (idx === this.#top) this.#top++;
    this.#blocks[idx] = block;
    this.#wrs[idx] = wr;
    this.#views[idx] = undefined;
    this.#msgs[idx] = undefined;
    this.#state[idx] = POSTED;
    this.#size++;
    this.#posted++;
  }

  /**
   * A receive completion of `user`'s CQ: the buffer it names, which must be posted (else the
   * completion is not one of ours: ERR_MUX_PROTOCOL). Returns its index.
   */
  take(wrId: number, user?: PoolUser): number {
    const idx = wrId;
    if (!(idx >= 0 && idx < this.#top) || this.#state[idx] !== POSTED) {
      throw new MuxProtocolError(`receive completion for buffer ${wrId}`);
    }
    this.#state[idx] = TAKEN;
    this.#owner[idx] = user;
    if (--this.#posted === 0) this.#emptied++;
    return idx;
  }

  block(idx: number): Block {
    return this.#blocks[idx] as Block;
  }

  /**
   * The buffer's message for the application: one object per buffer, re-armed for each
   * arrival once the previous one was released; the view is reused while lengths repeat.
   */
  hold(idx: number, channel: number, seq: number, length: number, charge: number): InboundMessage {
    this.#state[idx] = HELD;
    this.#held++;
    this.charges[idx] = charge;
    const block = this.#blocks[idx] as Block;
    let view = this.#views[idx];
    if (view === undefined || view.length !== length) {
      const all = block.bytes;
      view = new Uint8Array(all.buffer, all.byteOffset + WIRE_HEADER_BYTES, length);
      this.#views[idx] = view;
    }
    let m = this.#msgs[idx];
    if (m === undefined) {
      m = this.#newMessage(idx, block, channel, seq, view);
      this.#msgs[idx] = m;
    } else {
      rearmInbound(m, channel, seq, view, block);
    }
    return m;
  }

  /** Apart from `hold`: a closure over `idx` there would allocate a context per call. */
  #newMessage(idx: number, block: Block, channel: number, seq: number, view: Uint8Array) {
    return new InboundMessage(channel, seq, view, () => this.#released(idx), block);
  }

  #released(idx: number): void {
    const st = this.#state[idx];
    if (st !== HELD && st !== ORPHAN) return;
    if (st === ORPHAN) this.#orphans--;
    this.#state[idx] = TAKEN;
    this.#held--;
    const user = this.#owner[idx];
    if (user !== undefined) user.recvReleased(idx);
    else this.giveBack(idx);
  }

  /**
   * A taken buffer is free again: reposted, or freed when the pool holds more than its
   * leases need (or is closed); true then. A post that fails for now (isTransientPostError)
   * keeps it taken by `keeper` and returns false: the keeper gives it back again later (its
   * credit is not owed before). Another failure, or any without a keeper (teardown), frees
   * it and throws what the SRQ post threw.
   */
  giveBack(idx: number, keeper?: PoolUser): boolean {
    if (!this.#returning(idx)) return true;
    try {
      this.srq.postRecv(this.#wrs[idx] as RecvWr);
    } catch (err) {
      if (keeper !== undefined && isTransientPostError(err)) {
        this.#keep(idx, keeper, err);
        return false;
      }
      this.#unpost(idx);
      throw err;
    }
    return true;
  }

  /**
   * `giveBack(…, keeper)` of `idxs[0 … n)` with one SRQ post per POST_LIST_MAX buffers.
   * Returns how many stay taken by `keeper` after a post that failed for now, moved to
   * `idxs[0 … m)`; throws what another failure throws (the buffers it did not post are
   * freed then).
   */
  giveBackAll(idxs: number[], n: number, keeper: PoolUser): number {
    const wrs = this.#repostWrs;
    let k = 0;
    for (let i = 0; i < n; i++) {
      const idx = idxs[i] as number;
      if (this.#returning(idx)) wrs[k++] = this.#wrs[idx] as RecvWr;
    }
    for (let i = 0; i < k; i += POST_LIST_MAX) {
      const m = Math.min(POST_LIST_MAX, k - i);
      try {
        // Loaded on both paths: a keyed load only a rare lone repost ran had no type feedback,
        // and its first run deoptimized this function (then allocated until reoptimized).
        const first = wrs[i] as RecvWr;
        this.srq.postRecv(m === 1 ? first : this.#lists.list(wrs, i, m));
      } catch (err) {
        const posted = err instanceof RdmaPostError ? err.posted : 0;
        if (isTransientPostError(err)) {
          // idxs were all read above: its front takes the ones left, in their order.
          let left = 0;
          for (let j = i + posted; j < k; j++) {
            const idx = (wrs[j] as RecvWr).wrId;
            this.#keep(idx, keeper, err);
            idxs[left++] = idx;
          }
          return left;
        }
        for (let j = i + posted; j < k; j++) this.#unpost((wrs[j] as RecvWr).wrId);
        throw err;
      }
    }
    return 0;
  }

  /** Why the last buffer kept by a giveBack was not posted (for the keeper's final error). */
  get lastDeferral(): Error | undefined {
    return this.#lastDeferral;
  }

  /**
   * A taken buffer comes back: true when it is to be posted again (marked posted), false when
   * it is not the pool's to repost or was freed (the pool holds more than its leases need).
   */
  #returning(idx: number): boolean {
    if (this.#state[idx] !== TAKEN) return false;
    this.#owner[idx] = undefined;
    if (
      this.#closed ||
      this.#srq === undefined ||
      this.#size - this.#orphans > this.#leased + 3 * this.#step
    ) {
      this.#drop(idx);
      if (this.#size === 0 && this.#srq === undefined) {
        this.#free.length = 0;
        this.#top = 0;
      }
      return false;
    }
    this.#state[idx] = POSTED;
    this.#posted++;
    return true;
  }

  /** A buffer marked posted whose post failed for now: taken by `keeper` again. */
  #keep(idx: number, keeper: PoolUser, cause: Error): void {
    this.#posted--;
    this.#state[idx] = TAKEN;
    this.#owner[idx] = keeper;
    this.#lastDeferral = cause;
  }

  /** A buffer marked posted whose post failed: freed. */
  #unpost(idx: number): void {
    this.#posted--;
    this.#state[idx] = TAKEN;
    this.#drop(idx);
  }

  #drop(idx: number): void {
    const b = this.#blocks[idx];
    this.#blocks[idx] = undefined;
    this.#wrs[idx] = undefined;
    this.#views[idx] = undefined;
    this.#msgs[idx] = undefined;
    this.#state[idx] = EMPTY;
    this.#size--;
    this.#free.push(idx);
    try {
      if (b !== undefined && !b.released) b.release();
    } catch {
      // revoked by a closed allocator
    }
  }

  /**
   * A connection ended: buffers it took and did not hand to the application go back (a
   * receive whose handling failed); those the application holds go back when it releases
   * them (through the connection, which settles its accounting). Its leases are given back
   * by the caller.
   */
  forget(user: PoolUser): void {
    // After one refused post the rest are freed unposted: each post may wait out the lock's
    // budget on this thread (a peer holding the SRQ lock would cost one budget per buffer).
    let refused = false;
    for (let i = 0; i < this.#top; i++) {
      if (this.#owner[i] !== user) continue;
      // Held ones keep their owner (their release still settles the connection's accounting)
      // but no longer count for a lease.
      if (this.#state[i] === HELD) {
        this.#state[i] = ORPHAN;
        this.#orphans++;
        continue;
      }
      if (this.#state[i] !== TAKEN) continue;
      if (refused) {
        this.#owner[i] = undefined;
        this.#drop(i);
        continue;
      }
      try {
        this.giveBack(i);
      } catch {
        refused = true; // the SRQ refused it: the buffer is freed
      }
    }
  }

  stats(): ReceivePoolStats {
    const block = this.#blocks.find((b) => b !== undefined);
    return {
      buffers: this.#size,
      posted: this.#posted,
      leased: this.#leased,
      extraLeased: this.#extra,
      held: this.#held,
      orphans: this.#orphans,
      bufferBytes: this.#bufferBytes,
      registeredBytes: this.#size * (block?.capacity ?? this.#bufferBytes),
      maxBuffers: this.maxBuffers,
      emptied: this.#emptied,
    };
  }

  /**
   * After every QP on the SRQ closed: the SRQ goes, posted and taken buffers are freed, held
   * ones when the application releases them.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#srq?.close();
    } catch {
      // a QP still uses it: the PD's close takes it
    }
    for (let i = 0; i < this.#top; i++) {
      const s = this.#state[i];
      if (s === POSTED || s === TAKEN) {
        if (s === POSTED) this.#posted--;
        this.#drop(i);
      }
    }
  }
}
