// Over 500 lines on purpose: one concept, the registration cache (lookup, pinning,
// eviction, limits and its lifetime); its data structures already live in internal/.
import { Buffer } from 'node:buffer';
import { type AccessPolicy, accessFlags, policyIndex } from './AccessPolicy.js';
import type { Sge } from './Block.js';
import {
  AllocError,
  AllocLimitError,
  AllocUseAfterReleaseError,
  closedError,
  invalidArg,
  registrationError,
} from './errors.js';
import {
  checkInt,
  checkRange,
  checkRegion,
  checkRegistrar,
  describeValue,
  ownOptions,
  rest,
} from './internal/validate.js';
import type { Region, Registrar } from './Registrar.js';

export interface RegistrationCacheOptions {
  registrar: Registrar;
  /** Registered bytes the cache may hold, pinned and idle together. Default 256 MiB. */
  maxBytes?: number;
  /** Registrations the cache may hold. Default 1024. */
  maxEntries?: number;
  /** Access policy of `acquire` calls that name none. Default 'local'. */
  defaultAccess?: AccessPolicy;
}

export type RegistrationCacheState = 'open' | 'closing' | 'closed';

export interface RegistrationCacheStats {
  readonly state: RegistrationCacheState;
  /** Registrations held (pinned + idle). */
  readonly entries: number;
  /** Registrations with at least one unreleased `RegisteredBuffer`. */
  readonly pinnedEntries: number;
  readonly registeredBytes: number;
  readonly pinnedBytes: number;
  readonly maxBytes: number;
  readonly maxEntries: number;
  /** `acquire` calls served by an existing registration. */
  readonly hits: number;
  /** `acquire` calls that registered. */
  readonly misses: number;
  /** Idle registrations deregistered to make room (LRU). */
  readonly evictions: number;
  /** Registrations dropped by `invalidate`, or found stale (buffer detached or resized). */
  readonly invalidations: number;
  readonly registrations: number;
  readonly deregistrations: number;
}

type EntryState = 'cached' | 'invalid' | 'gone';

/**
 * Granularity of a remote-access registration: the pages around the acquired view, not the
 * whole ArrayBuffer, so a peer's key reaches little beyond what it was meant for.
 */
const REMOTE_PAGE_BYTES = 4096;

/**
 * One registration of [start, start + length) of one ArrayBuffer with one access policy:
 * the whole buffer for 'local', the pages around the acquired view for the remote policies.
 */
class Entry {
  readonly buffer: ArrayBufferLike;
  readonly policy: AccessPolicy;
  readonly region: Region;
  readonly start: number;
  readonly length: number;
  /** byteLength of the buffer when registered (a detached or resized buffer differs). */
  readonly bufferLength: number;
  refs = 0;
  state: EntryState = 'cached';
  prev: Entry | undefined = undefined;
  next: Entry | undefined = undefined;

  constructor(
    buffer: ArrayBufferLike,
    policy: AccessPolicy,
    region: Region,
    start: number,
    length: number,
  ) {
    this.buffer = buffer;
    this.policy = policy;
    this.region = region;
    this.start = start;
    this.length = length;
    this.bufferLength = buffer.byteLength;
  }

  /** True when this is the registration of exactly [start, end). */
  spans(start: number, end: number): boolean {
    return this.start === start && this.start + this.length === end;
  }
}

/**
 * Memory of the application's own buffer, registered (through the cache), pinned until
 * `release()`. `bytes` is exactly the view that was acquired (same memory, no copy); `addr`,
 * `lkey`, `rkey` name it in work requests, so it is itself an Sge.
 */
export class RegisteredBuffer implements Sge {
  readonly #cache: RegistrationCache;
  readonly #entry: Entry;
  readonly #bytes: Uint8Array;
  /** Offset of `bytes` from the start of the registration. */
  readonly #offset: number;
  #released = false;

  /** @internal Obtained from `RegistrationCache.acquire`. */
  constructor(cache: RegistrationCache, entry: Entry, bytes: Uint8Array, offset: number) {
    this.#cache = cache;
    this.#entry = entry;
    this.#bytes = bytes;
    this.#offset = offset;
  }

  get length(): number {
    return this.#bytes.byteLength;
  }

  get access(): AccessPolicy {
    return this.#entry.policy;
  }

  get released(): boolean {
    return this.#released;
  }

  get bytes(): Uint8Array {
    this.#check();
    return this.#bytes;
  }

  get addr(): number {
    this.#check();
    return this.#entry.region.addr + this.#offset;
  }

  get lkey(): number {
    this.#check();
    return this.#entry.region.lkey;
  }

  get rkey(): number {
    this.#check();
    return this.#entry.region.rkey;
  }

  /** A scatter/gather element over [offset, offset + length) of the buffer. */
  sge(offset = 0, length?: number): Sge {
    const len = rest(offset, length, this.length);
    this.#check();
    checkRange(offset, len, this.length, 'buffer');
    return {
      addr: this.#entry.region.addr + this.#offset + offset,
      length: len,
      lkey: this.#entry.region.lkey,
    };
  }

  /** Unpins the registration (it stays cached for reuse). A second call throws. */
  release(): void {
    if (this.#released) {
      throw new AllocError('ERR_ALLOC_DOUBLE_RELEASE', 'registered buffer released twice');
    }
    this.#released = true;
    if (!lost(this.#cache) && this.#entry.state !== 'gone') unpin(this.#cache, this.#entry);
  }

  #check(): void {
    if (this.#released) {
      throw new AllocUseAfterReleaseError(
        'registered buffer used after release',
        this.#entry.region.addr + this.#offset,
        undefined,
        undefined,
      );
    }
    if (lost(this.#cache) || this.#entry.state === 'gone') {
      throw closedError(
        'registered buffer',
        'its cache was destroyed or its protection domain closed',
      );
    }
  }
}

let unpin: (cache: RegistrationCache, entry: Entry) => void;
let lost: (cache: RegistrationCache) => boolean;

/**
 * Registers buffers the application already owns, once, and reuses the registration by
 * identity: every `acquire` of the same ArrayBuffer (or of any view of it) with the 'local'
 * policy is served by one registration of the whole ArrayBuffer, so user-provided data is
 * sent in place, without copies and without a registration per message. The remote
 * policies register only the 4 KiB pages (counted from the buffer's start) around the
 * acquired view, reused only by later views around exactly those pages, so a peer's rkey
 * reaches no more of the buffer than the pages of the view it was given for; views of Node's shared Buffer pool, which holds unrelated allocations,
 * are refused for remote access (ERR_ALLOC_INVALID_ARG).
 *
 * Acquired buffers are pinned until released; idle registrations are evicted least
 * recently used first when `maxBytes` or `maxEntries` would be exceeded. `invalidate`
 * drops a buffer's registrations (call it before reusing the memory for something the
 * peer must not reach, or before transferring the buffer); a detached or resized buffer
 * is noticed on the next `acquire` and registered afresh.
 */
export class RegistrationCache {
  readonly #registrar: Registrar;
  readonly #maxBytes: number;
  readonly #maxEntries: number;
  readonly #defaultAccess: AccessPolicy;
  /** Per buffer, per policy (policyIndex), the registrations of that buffer. */
  readonly #byBuffer = new Map<ArrayBufferLike, Entry[][]>();
  /** Idle entries, least recently used first. */
  #lruHead: Entry | undefined = undefined;
  #lruTail: Entry | undefined = undefined;
  #state: RegistrationCacheState = 'open';
  #entries = 0;
  #pinnedEntries = 0;
  #bytes = 0;
  #pinnedBytes = 0;
  #hits = 0;
  #misses = 0;
  #evictions = 0;
  #invalidations = 0;
  #registrations = 0;
  #deregistrations = 0;
  /** Entries not cached any more but still pinned (invalidated, or the cache is closing). */
  readonly #lingering = new Set<Entry>();

  /** The registrar said it is closed: every registration went with it (see #gone). */
  #lost = false;

  static {
    unpin = (cache, entry) => cache.#unpin(entry);
    lost = (cache) => cache.#gone();
  }

  constructor(options: RegistrationCacheOptions) {
    if (options === undefined) throw invalidArg('RegistrationCache needs options with a registrar');
    const o = ownOptions('RegistrationCache options', options) as Partial<RegistrationCacheOptions>;
    this.#registrar = checkRegistrar(o.registrar);
    if (this.#registrar.closed === true) {
      throw closedError('RegistrationCache', 'its registrar (protection domain) is closed');
    }
    this.#maxBytes = checkInt(
      'maxBytes',
      o.maxBytes ?? 256 * 1024 * 1024,
      1,
      Number.MAX_SAFE_INTEGER,
    );
    this.#maxEntries = checkInt('maxEntries', o.maxEntries ?? 1024, 1, Number.MAX_SAFE_INTEGER);
    const access = o.defaultAccess ?? 'local';
    policyIndex(access);
    this.#defaultAccess = access;
  }

  get state(): RegistrationCacheState {
    this.#gone();
    return this.#state;
  }

  /**
   * Pins a registration covering `buffer` (an ArrayBuffer, or any view of one), registering
   * it on first use: for 'local' the whole underlying ArrayBuffer, once; for the remote
   * policies the 4 KiB pages around the view. A Buffer of Node's shared pool is refused for
   * the remote policies (ERR_ALLOC_INVALID_ARG).
   * Throws ERR_ALLOC_LIMIT when it cannot fit (retryable while other buffers are pinned).
   */
  acquire(
    buffer: ArrayBufferLike | ArrayBufferView,
    access: AccessPolicy = this.#defaultAccess,
  ): RegisteredBuffer {
    if (this.#gone()) {
      throw closedError('RegistrationCache.acquire', 'its registrar (protection domain) is closed');
    }
    if (this.#state !== 'open') throw closedError('RegistrationCache.acquire');
    let ab: ArrayBufferLike;
    let offset = 0;
    let length: number;
    if (ArrayBuffer.isView(buffer)) {
      ab = buffer.buffer;
      offset = buffer.byteOffset;
      length = buffer.byteLength;
    } else if (buffer instanceof ArrayBuffer || isSharedArrayBuffer(buffer)) {
      ab = buffer;
      length = buffer.byteLength;
    } else {
      throw invalidArg(
        `acquire takes an ArrayBuffer, a SharedArrayBuffer or a view of one, got ${describeValue(buffer)}`,
      );
    }
    const pi = policyIndex(access);
    const list = this.#byBuffer.get(ab)?.[pi];
    // A loop, not filter/find: a hit is the data path and allocates nothing here.
    let stale = false;
    if (list !== undefined) for (const e of list) stale ||= e.bufferLength !== ab.byteLength;
    if (stale) {
      const gone = (list as Entry[]).filter((e) => e.bufferLength !== ab.byteLength);
      this.#invalidations += gone.length;
      this.#dropAll(gone); // detached or resized since it was registered
    }
    if (length === 0) throw invalidArg('cannot register an empty (or detached) buffer');
    if (access !== 'local' && isBufferPoolSlice(buffer, ab)) {
      throw invalidArg(
        `a Buffer from Node's shared pool (${ab.byteLength} bytes holding unrelated allocations) ` +
          `cannot be exposed with '${access}': use Buffer.alloc() or an allocator block`,
      );
    }
    const view = buffer instanceof Uint8Array ? buffer : new Uint8Array(ab, offset, length);
    // What this acquire registers: the whole buffer for 'local'; for the remote policies
    // only the pages around the view, and a registration is reused only for exactly those
    // pages (a wider one, made for a bigger view, would hand this view's peer a key to more).
    let start = 0;
    let end = ab.byteLength;
    if (access !== 'local') {
      start = offset - (offset % REMOTE_PAGE_BYTES);
      end = Math.min(end, Math.ceil((offset + length) / REMOTE_PAGE_BYTES) * REMOTE_PAGE_BYTES);
    }
    let entry: Entry | undefined;
    const current = this.#byBuffer.get(ab)?.[pi];
    if (current !== undefined) {
      for (const e of current) {
        if (e.spans(start, end)) {
          entry = e;
          break;
        }
      }
    }
    if (entry !== undefined) {
      this.#hits++;
      if (entry.refs === 0) this.#unlink(entry);
    } else {
      entry = this.#register(ab, access, start, end - start);
      this.#misses++;
      let slots = this.#byBuffer.get(ab);
      if (slots === undefined) {
        slots = [[], [], [], []];
        this.#byBuffer.set(ab, slots);
      }
      (slots[pi] as Entry[]).push(entry);
    }
    if (entry.refs++ === 0) {
      this.#pinnedEntries++;
      this.#pinnedBytes += entry.length;
    }
    return new RegisteredBuffer(this, entry, view, offset - entry.start);
  }

  /**
   * Drops the registrations of `buffer` (all access policies). Idle ones are deregistered
   * now; pinned ones when their last RegisteredBuffer is released. The next `acquire`
   * registers afresh. Returns how many registrations were dropped.
   */
  invalidate(buffer: ArrayBufferLike | ArrayBufferView): number {
    const ab = ArrayBuffer.isView(buffer) ? buffer.buffer : buffer;
    if (!(ab instanceof ArrayBuffer) && !isSharedArrayBuffer(ab)) {
      throw invalidArg(
        `invalidate takes an ArrayBuffer, a SharedArrayBuffer or a view of one, got ${describeValue(buffer)}`,
      );
    }
    if (this.#gone()) return 0;
    const slots = this.#byBuffer.get(ab);
    if (slots === undefined) return 0;
    const n = this.#dropAll(slots.flat());
    this.#invalidations += n;
    return n;
  }

  /** Drops every registration (see `invalidate`). Returns how many were dropped. */
  invalidateAll(): number {
    if (this.#gone()) return 0;
    const n = this.#dropAll([...this.#byBuffer.values()].flat(2));
    this.#invalidations += n;
    return n;
  }

  /** Deregisters every idle registration. Returns the bytes deregistered. */
  trim(): number {
    if (this.#gone()) return 0;
    const idle: Entry[] = [];
    for (let e = this.#lruHead; e !== undefined; e = e.next) idle.push(e);
    let freed = 0;
    for (const e of idle) freed += e.length;
    this.#dropAll(idle);
    return freed;
  }

  stats(): RegistrationCacheStats {
    this.#gone();
    return {
      state: this.#state,
      entries: this.#entries,
      pinnedEntries: this.#pinnedEntries,
      registeredBytes: this.#bytes,
      pinnedBytes: this.#pinnedBytes,
      maxBytes: this.#maxBytes,
      maxEntries: this.#maxEntries,
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.#evictions,
      invalidations: this.#invalidations,
      registrations: this.#registrations,
      deregistrations: this.#deregistrations,
    };
  }

  /**
   * Stops new acquires and deregisters idle registrations now; pinned ones are
   * deregistered as their buffers are released ('closing' until the last one). Idempotent.
   */
  close(): void {
    if (this.#gone() || this.#state !== 'open') return;
    this.#state = 'closing';
    try {
      this.#dropAll([...this.#byBuffer.values()].flat(2));
    } finally {
      if (this.#entries === 0) this.#state = 'closed';
    }
  }

  /** Deregisters everything now, pinned or not; RegisteredBuffers still held become unusable. */
  destroy(): void {
    if (this.#gone() || this.#state === 'closed') return;
    this.close();
    this.#state = 'closed';
    let first: unknown;
    for (const entry of [...this.#lingering]) {
      this.#lingering.delete(entry);
      const err = this.#deregister(entry);
      if (first === undefined) first = err;
    }
    this.#pinnedEntries = 0;
    this.#pinnedBytes = 0;
    if (first !== undefined) throw first;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  /**
   * True once the registrar says it is closed. The first time, every registration is
   * forgotten without calling deregister (the registrar took them with it) and the cache
   * is closed; RegisteredBuffers still held throw ERR_ALLOC_CLOSED.
   */
  #gone(): boolean {
    if (this.#lost) return true;
    if (this.#registrar.closed !== true) return false;
    this.#lost = true;
    for (const slots of this.#byBuffer.values()) {
      for (const e of slots.flat()) e.state = 'gone';
    }
    for (const e of this.#lingering) e.state = 'gone';
    this.#byBuffer.clear();
    this.#lingering.clear();
    this.#lruHead = undefined;
    this.#lruTail = undefined;
    this.#entries = 0;
    this.#bytes = 0;
    this.#pinnedEntries = 0;
    this.#pinnedBytes = 0;
    this.#state = 'closed';
    return true;
  }

  #register(ab: ArrayBufferLike, access: AccessPolicy, start: number, length: number): Entry {
    if (length > this.#maxBytes) {
      throw new AllocLimitError(
        `buffer of ${length} bytes exceeds the registration cache limit of ${this.#maxBytes}`,
        this.#maxBytes,
        length,
        false,
      );
    }
    while (this.#bytes + length > this.#maxBytes || this.#entries + 1 > this.#maxEntries) {
      const victim = this.#lruHead;
      if (victim === undefined) {
        const bytesFull = this.#bytes + length > this.#maxBytes;
        throw new AllocLimitError(
          bytesFull
            ? `registration cache full: ${this.#bytes} of ${this.#maxBytes} bytes pinned, ${length} more needed`
            : `registration cache full: ${this.#entries} of ${this.#maxEntries} entries pinned`,
          bytesFull ? this.#maxBytes : this.#maxEntries,
          bytesFull ? this.#bytes + length : this.#entries + 1,
          true,
        );
      }
      this.#evictions++;
      const err = this.#drop(victim);
      if (err !== undefined) throw err;
    }
    const range = new Uint8Array(ab, start, length);
    let region: Region;
    try {
      region = this.#registrar.register(range, accessFlags(access));
    } catch (err) {
      throw registrationError('register', length, err);
    }
    this.#registrations++;
    try {
      checkRegion(this.#registrar, region, length, 'register', range);
    } catch (err) {
      this.#deregistrations++;
      throw err;
    }
    this.#entries++;
    this.#bytes += length;
    return new Entry(ab, access, region, start, length);
  }

  /** Drops entries (see #drop); throws the first registrar failure after trying them all. */
  #dropAll(entries: readonly (Entry | undefined)[]): number {
    let n = 0;
    let first: AllocError | undefined;
    for (const entry of entries) {
      if (entry === undefined || entry.state !== 'cached') continue;
      n++;
      const err = this.#drop(entry);
      first ??= err;
    }
    if (first !== undefined) throw first;
    return n;
  }

  /**
   * Removes an entry from the lookup; deregisters it now if idle, else at its last release.
   * Returns (does not throw) a registrar failure.
   */
  #drop(entry: Entry): AllocError | undefined {
    if (entry.state !== 'cached') return undefined;
    const slots = this.#byBuffer.get(entry.buffer);
    if (slots !== undefined) {
      const list = slots[policyIndex(entry.policy)] as Entry[];
      const at = list.indexOf(entry);
      if (at >= 0) list.splice(at, 1);
      if (slots.every((l) => l.length === 0)) this.#byBuffer.delete(entry.buffer);
    }
    entry.state = 'invalid';
    if (entry.refs > 0) {
      this.#lingering.add(entry);
      return undefined;
    }
    this.#unlink(entry);
    return this.#deregister(entry);
  }

  #unpin(entry: Entry): void {
    if (--entry.refs > 0) return;
    this.#pinnedEntries--;
    this.#pinnedBytes -= entry.length;
    if (entry.state === 'cached') {
      this.#append(entry);
      return;
    }
    this.#lingering.delete(entry);
    const err = this.#deregister(entry);
    if (this.#state === 'closing' && this.#entries === 0) this.#state = 'closed';
    if (err !== undefined) throw err;
  }

  /** Deregisters and forgets an entry; returns (does not throw) a registrar failure. */
  #deregister(entry: Entry): AllocError | undefined {
    entry.state = 'gone';
    this.#entries--;
    this.#bytes -= entry.length;
    this.#deregistrations++;
    try {
      this.#registrar.deregister(entry.region);
      return undefined;
    } catch (err) {
      return registrationError('deregister', entry.length, err);
    }
  }

  #append(entry: Entry): void {
    entry.prev = this.#lruTail;
    entry.next = undefined;
    if (this.#lruTail === undefined) this.#lruHead = entry;
    else this.#lruTail.next = entry;
    this.#lruTail = entry;
  }

  #unlink(entry: Entry): void {
    if (entry.prev === undefined) {
      if (this.#lruHead !== entry) return; // not linked
      this.#lruHead = entry.next;
    } else {
      entry.prev.next = entry.next;
    }
    if (entry.next === undefined) this.#lruTail = entry.prev;
    else entry.next.prev = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
  }
}

/**
 * True for a Buffer carved out of Node's shared allocation pool (Buffer.from, allocUnsafe and
 * friends below half of Buffer.poolSize): its ArrayBuffer is the pool, other Buffers live beside it.
 */
function isBufferPoolSlice(view: unknown, ab: ArrayBufferLike): boolean {
  return (
    Buffer.isBuffer(view) &&
    ab.byteLength === Buffer.poolSize &&
    view.byteLength < Buffer.poolSize >>> 1 &&
    !isSharedArrayBuffer(ab)
  );
}

function isSharedArrayBuffer(value: unknown): value is SharedArrayBuffer {
  return typeof SharedArrayBuffer === 'function' && value instanceof SharedArrayBuffer;
}
