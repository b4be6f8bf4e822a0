import {
  encodePullRequest,
  MAX_MESSAGE_BYTES,
  PULL_REPLY_FIXED,
  pullRequestLength,
  writePullRequestHead,
} from '@rdmajs/ps-wire';
import type { RpcReply } from '@rdmajs/rpc-recovery';
import type { ShardLink } from '../ShardLink.js';
import type { ShardRouter } from '../ShardRouter.js';
import { type Deduper, halvesOf, LITTLE_ENDIAN } from './dedupe.js';
import type { ReadRows } from './OneSidedReads.js';

const EMPTY = new Uint8Array(0);
const EMPTY32 = new Uint32Array(0);
/** Plans kept for reuse per client: more than the pulls one process keeps in flight. */
const MAX_POOLED_PLANS = 64;
/**
 * A plan holding more than this (request buffers and index arrays of a huge pull) is not
 * kept: 64 idle plans of a million keys each would pin gigabytes, and such a pull's own
 * allocations are small beside its work.
 */
const MAX_POOLED_PLAN_BYTES = 1 << 20;

/** Capacity for `n` elements: a power of two, so a batch size that wanders grows it rarely. */
function capacityFor(n: number, min: number): number {
  let c = min;
  while (c < n) c *= 2;
  return c;
}

/** One segment's request, in a buffer reused from pull to pull (little-endian hosts). */
class RequestSlot {
  #buf: Uint8Array = EMPTY;
  /** The buffer's capacity, bytes. */
  get capacity(): number {
    return this.#buf.length;
  }
  /** The table whose name `#keys32` was laid out after. */
  #table = '';
  /** Key halves (lo, hi) from the request's keys to the end of the buffer. */
  keys32: Uint32Array = EMPTY32;
  /** The request: the first `pullRequestLength` bytes of the buffer. */
  bytes: Uint8Array = EMPTY;

  /** Writes the head of a request for `count` keys of `table`; the caller writes the keys. */
  prepare(table: string, count: number): void {
    const len = pullRequestLength(table, count);
    let buf = this.#buf;
    if (buf.length < len) {
      buf = this.#buf = new Uint8Array(capacityFor(len, 256));
      this.#table = '';
    }
    const keysAt = writePullRequestHead(buf, table, count);
    if (this.#table !== table) {
      this.#table = table;
      this.keys32 = new Uint32Array(
        buf.buffer,
        buf.byteOffset + keysAt,
        (buf.length - keysAt) >>> 2,
      );
    }
    // The exact-length view the call sends; the same one while the length repeats.
    if (this.bytes.length !== len || this.bytes.buffer !== buf.buffer) {
      this.bytes = buf.subarray(0, len);
    }
  }
}

/**
 * A pull's requests and where its rows will be, made before anything is sent. Plans are
 * reused: a pull whose replies all arrived gives its plan back when its rows are released
 * (every call settled, so no request is still referenced for a resend), and the next pull
 * fills the same arrays and request buffers — no typed array or request allocated per pull
 * in steady state. A pull that fails or is partial drops its plan to the GC instead.
 */
export class PullPlan {
  n = 0;
  distinct = 0;
  nSeg = 0;
  /** The map and links the pull was planned on (whatever changes meanwhile). */
  router: ShardRouter | undefined;
  links: readonly ShardLink[] = [];
  counts: Uint32Array = EMPTY32;
  /** Segment g of shard s: segBase[s] ≤ g < segBase[s + 1]. */
  segBase: Uint32Array = new Uint32Array(1);
  /** Keys in segment g. */
  segLen: Uint32Array = EMPTY32;
  /** Segment g's request (valid for the first `nSeg`). */
  reqs: Uint8Array[] = [];
  /** Row i (i < n) is in segment segOf[i], from float offOf[i]. */
  segOf: Uint32Array = EMPTY32;
  offOf: Uint32Array = EMPTY32;
  /** Scratch of the calls and the segments' rows (valid for the first `nSeg`). */
  readonly calls: Promise<RpcReply | ReadRows>[] = [];
  readonly segments: Float32Array[] = [];
  readonly #slots: RequestSlot[] = [];
  /** Big-endian hosts: each segment's keys, encoded into a portable request. */
  readonly #segKeys: BigUint64Array[] = [];
  /** Per distinct key: its shard, then (once the keys are written) its segment. */
  #shardOf: Uint32Array = EMPTY32;
  /** Per distinct key: its position in its shard's part, then its float offset in its segment. */
  #posOf: Uint32Array = EMPTY32;
  /** Scratch: each shard's key halves (single-segment pulls; emptied after use). */
  readonly #dest: Uint32Array[] = [];
  readonly #pool: PullPlan[];

  private constructor(pool: PullPlan[]) {
    this.#pool = pool;
  }

  /** A plan from `pool`, or a new one that returns there. */
  static take(pool: PullPlan[]): PullPlan {
    return pool.pop() ?? new PullPlan(pool);
  }

  /** Back to its pool for the next pull (only once no call can read its requests). */
  recycle(): void {
    if (this.#pool.length < MAX_POOLED_PLANS && this.#bytes() <= MAX_POOLED_PLAN_BYTES) {
      this.#pool.push(this);
    }
  }

  /** What the plan holds on to between pulls. */
  #bytes(): number {
    let n = 4 * (this.segOf.length + this.offOf.length + this.#shardOf.length + this.#posOf.length);
    for (const s of this.#slots) n += s.capacity;
    return n;
  }

  /**
   * Plans the pull of `keys` (their halves `h`): distinct keys, their shards, each segment's
   * request with its keys written in, and where each requested row will be. A plain method
   * (no closure captures its locals), so its per-key loops keep them in registers.
   */
  build(
    table: string,
    dim: number,
    keys: BigUint64Array,
    deduper: Deduper,
    router: ShardRouter,
    links: readonly ShardLink[],
  ): void {
    const n = keys.length;
    // De-duplicate: each distinct key is fetched once, from its shard. The deduper's arrays
    // are the client's scratch, read only here (before any await).
    const h = halvesOf(keys);
    const distinct = deduper.run(h, n);
    const { firstAt, uniqueOf } = deduper;
    const S = links.length;
    if (this.counts.length !== S) {
      this.counts = new Uint32Array(S);
      this.segBase = new Uint32Array(S + 1);
    } else this.counts.fill(0);
    if (this.#shardOf.length < distinct) {
      const cap = capacityFor(distinct, 16);
      this.#shardOf = new Uint32Array(cap);
      this.#posOf = new Uint32Array(cap);
    }
    if (this.segOf.length < n) {
      const cap = capacityFor(n, 16);
      this.segOf = new Uint32Array(cap);
      this.offOf = new Uint32Array(cap);
    }
    const counts = this.counts;
    const shardOf = this.#shardOf;
    const posOf = this.#posOf;
    for (let u = 0; u < distinct; u++) {
      const i = firstAt[u] as number;
      const s = router.shardOfHalves(h[2 * i] as number, h[2 * i + 1] as number);
      shardOf[u] = s;
      posOf[u] = (counts[s] as number)++;
    }
    // A shard's part goes in requests whose replies fit in one message, fetched in parallel;
    // segment c of shard s holds its keys [c·perRequest, (c+1)·perRequest).
    const perRequest = Math.max(1, Math.floor((MAX_MESSAGE_BYTES - PULL_REPLY_FIXED) / (4 * dim)));
    const segBase = this.segBase;
    for (let s = 0; s < S; s++)
      segBase[s + 1] = (segBase[s] as number) + Math.ceil((counts[s] as number) / perRequest);
    const nSeg = segBase[S] as number;
    if (this.segLen.length < nSeg) this.segLen = new Uint32Array(capacityFor(nSeg, 4));
    const segLen = this.segLen;
    const slots = this.#slots;
    while (slots.length < nSeg) slots.push(new RequestSlot());
    for (let s = 0; s < S; s++) {
      const count = counts[s] as number;
      for (let c = 0, g = segBase[s] as number; g < (segBase[s + 1] as number); c++, g++) {
        const len = Math.min(perRequest, count - c * perRequest);
        segLen[g] = len;
        if (LITTLE_ENDIAN) (slots[g] as RequestSlot).prepare(table, len);
        else this.#segKeys[g] = new BigUint64Array(len);
      }
    }
    const reqs = this.reqs;
    const segOf = this.segOf;
    const offOf = this.offOf;
    if (n <= perRequest) {
      // Every shard's part fits one request (the usual case): segment segBase[s] of shard s,
      // keys at their position there. Each distinct key's segment and row offset are worked
      // out once (into shardOf and posOf), then every requested row just looks them up.
      const dest = this.#dest;
      dest.length = S;
      if (LITTLE_ENDIAN) {
        for (let s = 0; s < S; s++) {
          if ((counts[s] as number) > 0)
            dest[s] = (slots[segBase[s] as number] as RequestSlot).keys32;
        }
      }
      for (let u = 0; u < distinct; u++) {
        const s = shardOf[u] as number;
        const p = posOf[u] as number;
        const i = firstAt[u] as number;
        if (LITTLE_ENDIAN) {
          // Each key written once, as u32 halves, straight into its request: no bigint per key.
          const to = dest[s] as Uint32Array;
          to[2 * p] = h[2 * i] as number;
          to[2 * p + 1] = h[2 * i + 1] as number;
        } else {
          (this.#segKeys[segBase[s] as number] as BigUint64Array)[p] = keys[i] as bigint;
        }
        shardOf[u] = segBase[s] as number;
        posOf[u] = p * dim;
        segOf[i] = segBase[s] as number;
        offOf[i] = p * dim;
      }
      dest.fill(EMPTY32);
      if (distinct !== n) this.#placeRepeats(n, uniqueOf);
    } else {
      for (let u = 0; u < distinct; u++) {
        const p = posOf[u] as number;
        const c = Math.floor(p / perRequest);
        const g = (segBase[shardOf[u] as number] as number) + c;
        const at = p - c * perRequest;
        const i = firstAt[u] as number;
        if (LITTLE_ENDIAN) {
          const to = (slots[g] as RequestSlot).keys32;
          to[2 * at] = h[2 * i] as number;
          to[2 * at + 1] = h[2 * i + 1] as number;
        } else {
          (this.#segKeys[g] as BigUint64Array)[at] = keys[i] as bigint;
        }
        shardOf[u] = g;
        posOf[u] = at * dim;
        segOf[i] = g;
        offOf[i] = at * dim;
      }
      if (distinct !== n) this.#placeRepeats(n, uniqueOf);
    }
    if (LITTLE_ENDIAN) {
      for (let g = 0; g < nSeg; g++) reqs[g] = (slots[g] as RequestSlot).bytes;
    } else {
      // In-place requests are native order: a big-endian host encodes portable copies.
      for (let g = 0; g < nSeg; g++) {
        reqs[g] = encodePullRequest({ table, keys: this.#segKeys[g] as BigUint64Array });
      }
    }
    this.n = n;
    this.distinct = distinct;
    this.nSeg = nSeg;
    this.router = router;
    this.links = links;
  }

  /**
   * Where each requested row will be, for a batch with repeated keys: its distinct key's
   * segment and offset (first occurrences were placed with their key; a batch without
   * repeats needs no pass over every key).
   */
  #placeRepeats(n: number, uniqueOf: Uint32Array): void {
    const segOf = this.segOf;
    const offOf = this.offOf;
    const shardOf = this.#shardOf;
    const posOf = this.#posOf;
    for (let i = 0; i < n; i++) {
      const u = uniqueOf[i] as number;
      segOf[i] = shardOf[u] as number;
      offOf[i] = posOf[u] as number;
    }
  }

  /** The (lo, hi) halves of segment g's keys (a copy: for the init rows of a missed shard). */
  /** Segment g's key halves as a view where possible (valid while the plan is). */
  keyView(g: number): Uint32Array {
    const len = this.segLen[g] as number;
    if (!LITTLE_ENDIAN) return halvesOf(this.#segKeys[g] as BigUint64Array);
    return (this.#slots[g] as RequestSlot).keys32.subarray(0, 2 * len);
  }

  keyHalves(g: number): Uint32Array {
    const len = this.segLen[g] as number;
    if (!LITTLE_ENDIAN) return halvesOf(this.#segKeys[g] as BigUint64Array);
    return (this.#slots[g] as RequestSlot).keys32.slice(0, 2 * len);
  }
}
