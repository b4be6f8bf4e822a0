// Over 500 lines on purpose: the allocator's one state machine (open → closed/destroyed,
// the registrar's lifetime) and its bookkeeping; arenas, heaps and blocks have files of their own.
import { kMaxLength } from 'node:buffer';
import { ACCESS_POLICIES, type AccessPolicy, accessFlags, policyIndex } from './AccessPolicy.js';
import { Arena, type ArenaStats } from './Arena.js';
import { Block, BlockKind, type BlockOwner, blockInternals } from './Block.js';
import {
  AllocError,
  AllocLimitError,
  AllocRegistrationError,
  AllocUseAfterReleaseError,
  closedError,
  registrationError,
} from './errors.js';
import { DedicatedRegion } from './internal/DedicatedRegion.js';
import { captureStack, poison } from './internal/debug.js';
import { Heap, type HeapHost } from './internal/Heap.js';
import { RegistrationBudget } from './internal/RegistrationBudget.js';
import {
  MAX_SLAB_BYTES,
  PAGE_BYTES,
  SIZE_CLASSES,
  SMALL_MAX_BYTES,
} from './internal/SizeClasses.js';
import type { Slab } from './internal/Slab.js';
import {
  checkInt,
  checkRegion,
  checkRegistrar,
  describeValue,
  ownOptions,
} from './internal/validate.js';
import type { Region, Registrar } from './Registrar.js';
import {
  RegistrationCache,
  type RegistrationCacheOptions,
  type RegistrationCacheStats,
} from './RegistrationCache.js';

const MiB = 1024 * 1024;
/** Arenas are at most 2 GiB (page counts and offsets stay small integers). */
const ARENA_LIMIT = 2048 * MiB;

export interface RegisteredAllocatorOptions {
  /** The registration functions (see `fromProtectionDomain` for a verbs PD). */
  registrar: Registrar;
  /**
   * Size of an arena: the unit in which memory is registered (a block larger than this
   * gets an arena of its own size, up to `maxArenaBytes`). Default 16 MiB; at least
   * 256 KiB; rounded up to whole pages.
   */
  arenaBytes?: number;
  /**
   * Largest arena. Blocks larger than this get a dedicated registration each (registered
   * on alloc, deregistered on release: as slow as registering per message, so keep it
   * above the messages of the data path). Default 64 MiB, at most 2 GiB.
   */
  maxArenaBytes?: number;
  /**
   * Registered bytes (arenas + dedicated regions, all policies) the allocator may hold.
   * Allocations beyond it throw ERR_ALLOC_LIMIT. Default 1 GiB.
   */
  maxRegisteredBytes?: number;
  /** Empty arenas kept registered per access policy (registering is slow). Default 2. */
  retainEmptyArenas?: number;
  /** Access policy of `alloc` calls that name none. Default 'local'. */
  defaultAccess?: AccessPolicy;
  /**
   * Debug mode: allocation and release stacks for leak reports and errors, released
   * memory poisoned and checked when handed out again (detects writes after release).
   * Costs a stack capture per alloc and a fill/scan of each block. Default false.
   */
  debug?: boolean;
  /** Limits of the registration cache for application buffers (`allocator.cache`). */
  cache?: Omit<RegistrationCacheOptions, 'registrar'>;
}

/**
 * Options of `allocator.forPeer()`: what a peer's pool may do differently from its owner.
 * Everything else (registrar, size classes, `maxArenaBytes`, debug, cache limits) is the owner's.
 */
export interface PeerPoolOptions {
  /** Names the pool in leak reports and stats (e.g. the peer's address). */
  label?: string;
  /** Arena size of the pool (default: the owner's). Smaller arenas suit many peers. */
  arenaBytes?: number;
  /**
   * Registered bytes this pool may hold (default: the owner's limit). The owner's
   * `maxRegisteredBytes` bounds the owner and all its pools together either way.
   */
  maxRegisteredBytes?: number;
  /** Empty arenas the pool keeps registered per access policy (default: the owner's). */
  retainEmptyArenas?: number;
  /** Access policy of the pool's `alloc` calls that name none (default: the owner's). */
  defaultAccess?: AccessPolicy;
}

/** Why the allocator is closed: its own close()/destroy(), or its registrar went away. */
const GONE = 'its registrar (protection domain) is closed';

/** 'open' → 'closing' (close() with live blocks) → 'closed' (last release, or destroy()). */
export type AllocatorState = 'open' | 'closing' | 'closed';

export interface SizeClassStats {
  /** Class size in bytes. */
  readonly size: number;
  readonly slabs: number;
  readonly liveBlocks: number;
  /** Bytes requested by the live blocks of the class. */
  readonly inUseBytes: number;
  /** Slots in the class's slabs (live + free). */
  readonly capacityBlocks: number;
}

export interface AllocatorStats {
  readonly state: AllocatorState;
  /** Registered bytes: arenas + dedicated regions (not the registration cache). */
  readonly registeredBytes: number;
  readonly maxRegisteredBytes: number;
  readonly arenaBytes: number;
  readonly dedicatedBytes: number;
  /** Bytes requested by live blocks. */
  readonly inUseBytes: number;
  /** Bytes live blocks occupy (class sizes, whole pages, dedicated lengths). */
  readonly allocatedBytes: number;
  readonly liveBlocks: number;
  readonly allocs: number;
  readonly releases: number;
  /** Allocations that failed on a limit, the registrar or a debug check (not on bad arguments). */
  readonly failedAllocs: number;
  /** Registrations and deregistrations the allocator made (arenas, dedicated regions). */
  readonly registrations: number;
  readonly deregistrations: number;
  /** Deregistrations the registrar failed (the region is forgotten either way). */
  readonly deregistrationFailures: number;
  /** registeredBytes / inUseBytes (0 while nothing is in use). */
  readonly overhead: number;
  /** Waste inside blocks: 1 − inUseBytes / allocatedBytes (0 when nothing is live). */
  readonly internalFragmentation: number;
  /**
   * Scattering of free arena space: 1 − largest free run / free arena bytes (0 when there is
   * no free space or it is one run).
   */
  readonly externalFragmentation: number;
  /** Per size class (summed over access policies), in class order. */
  readonly classes: readonly SizeClassStats[];
  readonly large: {
    readonly liveBlocks: number;
    readonly inUseBytes: number;
    readonly allocatedBytes: number;
  };
  readonly dedicated: { readonly liveBlocks: number; readonly inUseBytes: number };
  readonly arenas: readonly ArenaStats[];
  readonly cache: RegistrationCacheStats;
  /**
   * The peer pools made by `forPeer()` that are not closed yet, summed (their own stats say
   * more). The fields above count this allocator's own arenas only.
   */
  readonly peerPools: {
    readonly pools: number;
    readonly registeredBytes: number;
    readonly inUseBytes: number;
    readonly liveBlocks: number;
  };
}

export interface LiveBlockInfo {
  readonly addr: number;
  readonly length: number;
  readonly capacity: number;
  readonly access: AccessPolicy;
  readonly kind: 'small' | 'large' | 'dedicated';
  /** Allocation stack (debug mode only). */
  readonly allocatedAt: string | undefined;
  /** The label of the peer pool (`forPeer()`) the block is from; undefined for the owner's own. */
  readonly pool: string | undefined;
}

export interface LeakReport {
  readonly liveBlocks: number;
  readonly inUseBytes: number;
  readonly blocks: readonly LiveBlockInfo[];
}

const I = blockInternals();
const RING = 256;

/**
 * Registered memory for building messages in place. Large arenas are registered once per
 * access policy (more on demand, up to `maxRegisteredBytes`) and carved into slabs of
 * size classes for small blocks (≤ 32 KiB) and page runs for large ones (best fit); blocks
 * larger than an arena get a dedicated registration. Registration is injected, so nothing
 * here imports verbs.
 *
 * `alloc(n)` is O(1) for small blocks and allocates one Block object; it registers only
 * when the arenas are full. Blocks are released with `block.release()`.
 */
export class RegisteredAllocator {
  readonly #registrar: Registrar;
  readonly #arenaBytes: number;
  readonly #maxArenaBytes: number;
  readonly #maxRegistered: number;
  readonly #retainEmpty: number;
  /** The options `forPeer()` passes on (validated once here). */
  readonly #cacheOptions: Omit<RegistrationCacheOptions, 'registrar'>;
  /** Registered bytes of this allocator and its peer pools together (the owner's limit). */
  #budget: RegistrationBudget<RegisteredAllocator>;
  /** The allocator this pool was made from by `forPeer()` (closes it), if any. */
  #parent: RegisteredAllocator | undefined = undefined;
  /** Peer pools made by `forPeer()` that are not closed yet. */
  readonly #children = new Set<RegisteredAllocator>();
  #label: string | undefined = undefined;
  /** Counts arenas becoming empty (their `emptiedSeq`). */
  #emptiedSeq = 0;
  readonly #defaultAccess: AccessPolicy;
  readonly #debug: boolean;
  readonly #cache: RegistrationCache;
  readonly #heaps: (Heap | undefined)[] = [undefined, undefined, undefined, undefined];
  readonly #host: HeapHost;
  /** What blocks call back (kept off the public surface). */
  readonly #owner: BlockOwner;
  /** The registrar said it is closed: everything it registered is gone (see #gone). */
  #lost = false;
  readonly #dedicated = new Set<DedicatedRegion>();
  /** Debug: recently released blocks, to name the culprit of a write after release. */
  readonly #released: (Block | undefined)[] = [];
  #releasedPos = 0;
  /** A deregistration failure met inside heap bookkeeping, thrown once the call is consistent. */
  #deferred: AllocError | undefined = undefined;
  #state: AllocatorState = 'open';
  #nextArenaId = 1;
  #registered = 0;
  #dedicatedBytes = 0;
  #dedicatedInUse = 0;
  #liveBlocks = 0;
  #inUse = 0;
  #allocated = 0;
  #allocs = 0;
  #releases = 0;
  #failed = 0;
  #registrations = 0;
  #deregistrations = 0;
  #deregistrationFailures = 0;

  constructor(options: RegisteredAllocatorOptions) {
    if (options === undefined)
      throw new AllocError(
        'ERR_ALLOC_INVALID_ARG',
        'RegisteredAllocator needs options with a registrar',
      );
    const o = ownOptions(
      'RegisteredAllocator options',
      options,
    ) as Partial<RegisteredAllocatorOptions>;
    this.#registrar = checkRegistrar(o.registrar);
    if (this.#registrar.closed === true) throw closedError('RegisteredAllocator', GONE);
    const arenaBytes = checkInt(
      'arenaBytes',
      o.arenaBytes ?? 16 * MiB,
      MAX_SLAB_BYTES,
      ARENA_LIMIT,
    );
    this.#arenaBytes = roundUpPage(arenaBytes);
    this.#maxArenaBytes = roundUpPage(
      checkInt(
        'maxArenaBytes',
        o.maxArenaBytes ?? Math.max(64 * MiB, this.#arenaBytes),
        this.#arenaBytes,
        ARENA_LIMIT,
      ),
    );
    this.#maxRegistered = checkInt(
      'maxRegisteredBytes',
      o.maxRegisteredBytes ?? 1024 * MiB,
      1,
      Number.MAX_SAFE_INTEGER,
    );
    this.#retainEmpty = checkInt('retainEmptyArenas', o.retainEmptyArenas ?? 2, 0, 1 << 20);
    const access = o.defaultAccess ?? 'local';
    policyIndex(access);
    this.#defaultAccess = access;
    if (o.debug !== undefined && o.debug !== null && typeof o.debug !== 'boolean') {
      throw new AllocError(
        'ERR_ALLOC_INVALID_ARG',
        `debug must be a boolean, got ${describeValue(o.debug)}`,
      );
    }
    this.#debug = o.debug === true;
    const cache = ownOptions('cache options', o.cache);
    this.#cacheOptions = cache;
    this.#cache = new RegistrationCache({ ...cache, registrar: this.#registrar });
    this.#budget = new RegistrationBudget(this.#maxRegistered);
    this.#budget.members.add(this);
    const registrar = this.#registrar;
    this.#owner = {
      releaseBlock: (block) => this.#releaseBlock(block),
      // On every block access: one property read while the registrar is alive.
      lost: () => this.#lost || (registrar.closed === true && this.#gone()),
    };
    this.#host = {
      debug: this.#debug,
      owner: this.#owner,
      grow: (heap, pages) => this.#grow(heap, pages),
      arenaEmptied: (heap, arena) => this.#arenaEmptied(heap, arena),
      corrupted: (arena, offset) => this.#corrupted(arena, offset),
    };
  }

  get state(): AllocatorState {
    this.#gone();
    return this.#state;
  }

  get debug(): boolean {
    return this.#debug;
  }

  /** Same as stats().registeredBytes, without building a snapshot (cheap to sample). */
  get registeredBytes(): number {
    this.#gone();
    return this.#registered;
  }

  /** Same as stats().inUseBytes, without building a snapshot. */
  get inUseBytes(): number {
    this.#gone();
    return this.#inUse;
  }

  /** Same as stats().liveBlocks, without building a snapshot. */
  get liveBlocks(): number {
    this.#gone();
    return this.#liveBlocks;
  }

  /** Registration cache for buffers the application owns (shares the registrar). */
  get cache(): RegistrationCache {
    return this.#cache;
  }

  /** The label given to `forPeer()`; undefined for an allocator made with `new`. */
  get label(): string | undefined {
    return this.#label;
  }

  /**
   * A pool for the memory of one peer (or connection): an allocator with the same registrar,
   * size classes and options, whose arenas hold nothing but its own blocks. An rkey reaches
   * its whole registration, so a key handed out for a remote-access block of this pool
   * reaches only this pool's memory, never the owner's or another pool's. The owner's
   * `maxRegisteredBytes` bounds the owner and all its pools together (empty arenas of any
   * of them are given back when the limit is in the way); `close()`/`destroy()` of the
   * owner close its pools first; the owner's `leakReport()` lists their live blocks too.
   * Close the pool when its peer goes away (its arenas are deregistered as their blocks
   * are released). Blocks belong to the pool: `owner.owns(block)` is false for them.
   */
  forPeer(options: PeerPoolOptions = {}): RegisteredAllocator {
    if (this.#gone()) throw closedError('RegisteredAllocator.forPeer', GONE);
    if (this.#state !== 'open') throw closedError('RegisteredAllocator.forPeer');
    const o = ownOptions('forPeer options', options) as Partial<PeerPoolOptions>;
    if (o.label !== undefined && o.label !== null && typeof o.label !== 'string') {
      throw new AllocError(
        'ERR_ALLOC_INVALID_ARG',
        `label must be a string, got ${describeValue(o.label)}`,
      );
    }
    const pool = new RegisteredAllocator({
      registrar: this.#registrar,
      arenaBytes: o.arenaBytes ?? this.#arenaBytes,
      maxArenaBytes: this.#maxArenaBytes,
      maxRegisteredBytes: o.maxRegisteredBytes ?? this.#budget.max,
      retainEmptyArenas: o.retainEmptyArenas ?? this.#retainEmpty,
      defaultAccess: o.defaultAccess ?? this.#defaultAccess,
      debug: this.#debug,
      cache: this.#cacheOptions,
    });
    pool.#label = o.label ?? undefined;
    pool.#parent = this;
    pool.#budget = this.#budget;
    this.#budget.members.add(pool);
    this.#children.add(pool);
    return pool;
  }

  /**
   * A block of `n` bytes (n ≥ 1) of registered memory with the given access policy. Its
   * contents are unspecified (not zeroed). Throws ERR_ALLOC_LIMIT when `maxRegisteredBytes`
   * would be exceeded, ERR_ALLOC_REGISTRATION when the registrar fails.
   */
  alloc(n: number, access: AccessPolicy = this.#defaultAccess): Block {
    if (this.#gone()) throw closedError('RegisteredAllocator.alloc', GONE);
    if (this.#state !== 'open') throw closedError('RegisteredAllocator.alloc');
    if (!Number.isSafeInteger(n) || n < 1) {
      throw new AllocError(
        'ERR_ALLOC_INVALID_ARG',
        `alloc size must be a positive safe integer, got ${describeValue(n)}`,
      );
    }
    const pi = policyIndex(access);
    const heap = this.#heaps[pi] ?? this.#makeHeap(pi);
    const stack = this.#debug ? captureStack(this.alloc) : undefined;
    let block: Block;
    try {
      if (n <= SMALL_MAX_BYTES) block = heap.allocSmall(n, stack);
      else if (n <= this.#maxArenaBytes) block = heap.allocLarge(n, stack);
      else block = this.#allocDedicated(heap, n, stack);
    } catch (err) {
      this.#failed++;
      this.#deferred = undefined;
      throw err;
    }
    // A deregistration that failed while making room is counted in
    // stats().deregistrationFailures; throwing it here would lose the block.
    this.#deferred = undefined;
    this.#allocs++;
    this.#liveBlocks++;
    this.#inUse += n;
    this.#allocated += block.capacity;
    return block;
  }

  /** Same as `block.release()`, with a check that the block is from this allocator. */
  release(block: Block): void {
    if (!I.is(block) || I.owner(block) !== this.#owner) {
      throw new AllocError(
        'ERR_ALLOC_FOREIGN_BLOCK',
        `release of a block this allocator did not allocate (got ${describeValue(block)})`,
      );
    }
    block.release();
  }

  /** True when `block` was allocated here (live or not). */
  owns(block: unknown): boolean {
    return I.is(block) && I.owner(block) === this.#owner;
  }

  /** Called by `Block.release()` through #owner. */
  #releaseBlock(block: Block): void {
    if (I.owner(block) !== this.#owner) {
      throw new AllocError(
        'ERR_ALLOC_FOREIGN_BLOCK',
        'release of a block this allocator did not allocate',
      );
    }
    const kind = I.kind(block);
    let arena: Arena | undefined;
    let dedicated: DedicatedRegion | undefined;
    if (kind === BlockKind.Small) {
      const slab = I.home(block) as Slab;
      arena = slab.arena;
      if (!this.#heapOf(arena).releaseSmall(block, slab, I.index(block))) throw foreign();
    } else if (kind === BlockKind.Large) {
      arena = I.home(block) as Arena;
      if (!this.#heapOf(arena).releaseLarge(block, arena, I.index(block))) throw foreign();
    } else {
      dedicated = I.home(block) as DedicatedRegion;
      if (dedicated.block !== block || !this.#dedicated.has(dedicated)) throw foreign();
      this.#dedicated.delete(dedicated);
      dedicated.block = undefined;
      this.#account(-dedicated.byteLength);
      this.#dedicatedBytes -= dedicated.byteLength;
      this.#dedicatedInUse -= block.length;
    }
    this.#releases++;
    this.#liveBlocks--;
    this.#inUse -= block.length;
    this.#allocated -= block.capacity;
    I.markReleased(block, this.#debug ? captureStack(Block.prototype.release) : undefined);
    if (this.#debug) this.#remember(block);
    let err: AllocError | undefined;
    if (dedicated !== undefined) {
      if (this.#debug) poison(dedicated.bytes, 0, dedicated.byteLength);
      err = this.#deregister(dedicated.region, dedicated.byteLength);
    } else if (this.#state === 'closing' && arena !== undefined && arena.liveBlocks === 0) {
      err = this.#retire(arena);
    }
    if (this.#state === 'closing' && this.#liveBlocks === 0) this.#finishClose();
    err ??= this.#takeDeferred();
    if (err !== undefined) throw err;
  }

  /**
   * Registers arenas ahead of time so that `bytes` more bytes of `access` memory are
   * available without registering on the data path. These arenas stay registered when
   * empty (until close). Throws ERR_ALLOC_LIMIT past `maxRegisteredBytes`.
   */
  reserve(bytes: number, access: AccessPolicy = this.#defaultAccess): void {
    if (this.#gone()) throw closedError('RegisteredAllocator.reserve', GONE);
    if (this.#state !== 'open') throw closedError('RegisteredAllocator.reserve');
    checkInt('bytes', bytes, 0, Number.MAX_SAFE_INTEGER);
    const pi = policyIndex(access);
    const heap = this.#heaps[pi] ?? this.#makeHeap(pi);
    let free = heap.freeBytes();
    if (free >= bytes) return;
    const limit = Math.min(this.#maxRegistered, this.#budget.max);
    if (bytes > limit) {
      throw new AllocLimitError(
        `reserving ${bytes} bytes can never fit maxRegisteredBytes (${limit})`,
        limit,
        bytes,
        false,
      );
    }
    // All or nothing: the whole shortfall must fit under the limit before anything is
    // registered (reserve(2 ** 53 - 1) must not register up to the limit and then fail).
    this.#checkRoom(roundUpPage(bytes - free), heap, 0);
    free = heap.freeBytes(); // making room may have retired empty arenas of this heap
    const added: Arena[] = [];
    try {
      while (free < bytes) {
        const rest = roundUpPage(bytes - free);
        // Arenas of arenaBytes, but never more than the limit leaves (nor less than the rest).
        const room = floorPage(this.#room());
        const want = Math.min(
          this.#maxArenaBytes,
          Math.max(rest, Math.min(this.#arenaBytes, room)),
        );
        this.#checkRoom(want, heap, 0);
        const arena = this.#newArena(heap, want);
        arena.pinned = true;
        added.push(arena);
        free += arena.byteLength;
      }
    } catch (err) {
      for (const arena of added) this.#retire(arena); // a deregistration failure is counted
      throw err;
    }
  }

  /**
   * Gives back what is registered but unused: empty slabs go back to their arenas and
   * empty arenas (also retained and reserved ones) are deregistered, and so are idle
   * cache registrations. Returns the bytes deregistered.
   */
  trim(): number {
    if (this.#gone() || this.#state === 'closed') return 0;
    const before = this.#registered;
    const err = this.#reclaim() ?? this.#takeDeferred();
    const freed = before - this.#registered + this.#cache.trim();
    if (err !== undefined) throw err;
    return freed;
  }

  stats(): AllocatorStats {
    this.#gone();
    const classes = SIZE_CLASSES.map((size, i) => {
      let slabs = 0;
      let liveBlocks = 0;
      let inUseBytes = 0;
      let capacityBlocks = 0;
      for (const heap of this.#heaps) {
        const pool = heap?.pools[i];
        if (pool === undefined) continue;
        slabs += pool.slabs;
        liveBlocks += pool.liveBlocks;
        inUseBytes += pool.inUseBytes;
        capacityBlocks += pool.slabs * pool.slabCapacity;
      }
      return { size, slabs, liveBlocks, inUseBytes, capacityBlocks };
    });
    const arenas: ArenaStats[] = [];
    let large = { liveBlocks: 0, inUseBytes: 0, allocatedBytes: 0 };
    let arenaBytes = 0;
    for (const heap of this.#heaps) {
      if (heap === undefined) continue;
      arenaBytes += heap.arenaBytes;
      for (const arena of heap.arenas) arenas.push(arena.stats());
      large = {
        liveBlocks: large.liveBlocks + heap.largeLive,
        inUseBytes: large.inUseBytes + heap.largeInUseBytes,
        allocatedBytes: large.allocatedBytes + heap.largeAllocatedBytes,
      };
    }
    let freeArena = 0;
    let largestFree = 0;
    for (const a of arenas) {
      freeArena += a.bytes - a.usedBytes;
      largestFree = Math.max(largestFree, a.largestFreeRun);
    }
    return {
      state: this.#state,
      registeredBytes: this.#registered,
      maxRegisteredBytes: this.#maxRegistered,
      arenaBytes,
      dedicatedBytes: this.#dedicatedBytes,
      inUseBytes: this.#inUse,
      allocatedBytes: this.#allocated,
      liveBlocks: this.#liveBlocks,
      allocs: this.#allocs,
      releases: this.#releases,
      failedAllocs: this.#failed,
      registrations: this.#registrations,
      deregistrations: this.#deregistrations,
      deregistrationFailures: this.#deregistrationFailures,
      overhead: this.#inUse === 0 ? 0 : this.#registered / this.#inUse,
      internalFragmentation: this.#allocated === 0 ? 0 : 1 - this.#inUse / this.#allocated,
      externalFragmentation: freeArena === 0 ? 0 : 1 - largestFree / freeArena,
      classes,
      large,
      dedicated: { liveBlocks: this.#dedicated.size, inUseBytes: this.#dedicatedInUse },
      arenas,
      cache: this.#cache.stats(),
      peerPools: this.#poolTotals({ pools: 0, registeredBytes: 0, inUseBytes: 0, liveBlocks: 0 }),
    };
  }

  /** Adds up the peer pools below this allocator (pools of pools too). */
  #poolTotals(t: {
    pools: number;
    registeredBytes: number;
    inUseBytes: number;
    liveBlocks: number;
  }): AllocatorStats['peerPools'] {
    for (const c of this.#children) {
      c.#gone();
      t.pools++;
      t.registeredBytes += c.#registered;
      t.inUseBytes += c.#inUse;
      t.liveBlocks += c.#liveBlocks;
      c.#poolTotals(t);
    }
    return t;
  }

  /**
   * Every live block, with its allocation stack in debug mode; the blocks of the peer pools
   * made by `forPeer()` (not closed yet) too, with their pool's label.
   */
  leakReport(): LeakReport {
    this.#gone();
    const blocks: LiveBlockInfo[] = [];
    for (const heap of this.#heaps) {
      if (heap === undefined) continue;
      for (const b of heap.liveBlocks()) {
        blocks.push({
          addr: b.addr,
          length: b.length,
          capacity: b.capacity,
          access: b.access,
          kind: I.kind(b) === BlockKind.Small ? 'small' : 'large',
          allocatedAt: b.allocatedAt,
          pool: this.#label,
        });
      }
    }
    for (const d of this.#dedicated) {
      const b = d.block as Block;
      blocks.push({
        addr: b.addr,
        length: b.length,
        capacity: b.capacity,
        access: b.access,
        kind: 'dedicated',
        allocatedAt: b.allocatedAt,
        pool: this.#label,
      });
    }
    // A loop, not push(...): a pool with very many live blocks would overflow the stack.
    for (const c of this.#children) for (const b of c.leakReport().blocks) blocks.push(b);
    blocks.sort((a, b) => a.addr - b.addr);
    let inUseBytes = 0;
    for (const b of blocks) inUseBytes += b.length;
    return { liveBlocks: blocks.length, inUseBytes, blocks };
  }

  /**
   * Stops new allocations and closes the registration cache. Arenas without live blocks
   * are deregistered now; the others as soon as their last block is released (memory a
   * work request may still use is never deregistered under it). Idempotent.
   */
  close(): void {
    if (this.#gone() || this.#state !== 'open') return;
    this.#state = 'closing';
    let first: unknown;
    for (const pool of [...this.#children]) {
      try {
        pool.close();
      } catch (err) {
        first ??= err;
      }
    }
    try {
      this.#cache.close();
    } catch (err) {
      first ??= err;
    }
    for (const heap of this.#heaps) {
      if (heap === undefined) continue;
      for (const arena of [...heap.arenas]) {
        if (arena.liveBlocks !== 0) continue;
        const err = this.#retire(arena);
        first ??= err;
      }
    }
    if (this.#liveBlocks === 0) this.#finishClose();
    if (first !== undefined) throw first;
  }

  /**
   * Deregisters everything now, live blocks included: they become unusable (their
   * accessors throw ERR_ALLOC_CLOSED, their release() does nothing). Idempotent.
   */
  destroy(): void {
    // Closed with buffers still pinned in the cache: those are deregistered now too.
    if (
      this.#gone() ||
      (this.#state === 'closed' && this.#cache.state === 'closed' && this.#children.size === 0)
    ) {
      return;
    }
    let first: unknown;
    try {
      this.close();
    } catch (err) {
      first = err;
    }
    for (const pool of [...this.#children]) {
      try {
        pool.destroy();
      } catch (err) {
        first ??= err;
      }
    }
    first ??= this.#teardown(true);
    if (first !== undefined) throw first;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  /**
   * True once the registrar says it is closed (a verbs PD or device closed under the
   * allocator). The first time, every block is revoked and every region forgotten without
   * calling deregister: the registrar took its registrations with it.
   */
  #gone(): boolean {
    if (this.#lost) return true;
    if (this.#registrar.closed !== true) return false;
    this.#lost = true;
    this.#teardown(false);
    return true;
  }

  /**
   * Revokes every live block and drops every region, deregistering them when `deregister`
   * (destroy) or not (the registrar is gone). Returns the first registrar failure.
   */
  #teardown(deregister: boolean): unknown {
    let first: unknown;
    if (deregister) {
      try {
        this.#cache.destroy();
      } catch (err) {
        first = err;
      }
    }
    for (const heap of this.#heaps) {
      if (heap === undefined) continue;
      for (const block of [...heap.liveBlocks()]) I.revoke(block);
      for (const arena of [...heap.arenas]) {
        arena.liveBlocks = 0;
        const err = this.#retire(arena, deregister);
        first ??= err;
      }
    }
    for (const d of [...this.#dedicated]) {
      if (d.block !== undefined) I.revoke(d.block);
      this.#dedicated.delete(d);
      this.#account(-d.byteLength);
      this.#dedicatedBytes -= d.byteLength;
      if (deregister) first ??= this.#deregister(d.region, d.byteLength);
    }
    this.#liveBlocks = 0;
    this.#inUse = 0;
    this.#allocated = 0;
    this.#dedicatedInUse = 0;
    this.#finishClose();
    return first;
  }

  /** Registered bytes changed by `delta`: this allocator's count and its family's budget. */
  #account(delta: number): void {
    this.#registered += delta;
    this.#budget.used += delta;
  }

  /** True when `need` more bytes fit under this allocator's limit and its family's. */
  #fits(need: number): boolean {
    return this.#registered + need <= this.#maxRegistered && this.#budget.fits(need);
  }

  /** Bytes this allocator may still register (its own limit and its family's). */
  #room(): number {
    return Math.min(this.#maxRegistered - this.#registered, this.#budget.room);
  }

  #makeHeap(pi: number): Heap {
    const policy = ACCESS_POLICIES[pi] as AccessPolicy;
    const heap = new Heap(policy, accessFlags(policy), this.#host);
    this.#heaps[pi] = heap;
    return heap;
  }

  #heapOf(arena: Arena): Heap {
    return this.#heaps[arena.policyIndex] as Heap;
  }

  /** HeapHost.grow: a new arena big enough for `pages`, or room reclaimed. */
  #grow(heap: Heap, pages: number): void {
    const need = pages * PAGE_BYTES;
    if (this.#checkRoom(need, heap, pages)) return;
    // Fixed-size arenas (a block larger than arenaBytes gets an arena of its own size):
    // measured on a 64 B–4 MiB mix, growing arenas with the heap left more slack than it
    // saved registrations. Near the limit the arena shrinks to what is left (≥ need).
    const size = Math.max(need, Math.min(this.#arenaBytes, floorPage(this.#room())));
    this.#newArena(heap, size);
  }

  /**
   * Makes sure `need` more bytes may be registered: reclaims unused arenas when the limit
   * is in the way. Returns true when reclaiming made a run of `pages` pages free in `heap`
   * (no registration needed then). Throws ERR_ALLOC_LIMIT when it cannot make room.
   */
  #checkRoom(need: number, heap: Heap, pages: number): boolean {
    if (this.#fits(need)) return false;
    const err = this.#reclaim(need);
    if (err !== undefined) throw err;
    if (pages > 0 && heap.index.findBest(pages) !== undefined) return true;
    // The family's limit in the way: the owner's and the other pools' empty arenas go too.
    for (const m of this.#budget.members) {
      if (this.#registered + need > this.#maxRegistered || this.#budget.fits(need)) break;
      if (m === this) continue;
      const e = m.#reclaim(need, this.#budget);
      if (e !== undefined) throw e;
    }
    if (this.#fits(need)) return false;
    const own = this.#registered + need > this.#maxRegistered;
    const limit = own ? this.#maxRegistered : this.#budget.max;
    const used = own ? this.#registered : this.#budget.used;
    throw new AllocLimitError(
      `registering ${need} more bytes would exceed maxRegisteredBytes ` +
        `(${used} of ${limit} registered${own ? '' : ' by the allocator and its peer pools'})`,
      limit,
      used + need,
      need <= Math.min(this.#maxRegistered, this.#budget.max),
    );
  }

  #newArena(heap: Heap, size: number): Arena {
    const region = this.#registerRegion(size, heap.flags);
    const arena = new Arena(
      this.#nextArenaId++,
      heap.policy,
      heap.flags,
      region,
      size / PAGE_BYTES,
    );
    if (this.#debug) poison(arena.bytes, 0, size);
    heap.addArena(arena);
    this.#account(size);
    return arena;
  }

  #allocDedicated(heap: Heap, n: number, stack: string | undefined): Block {
    this.#checkRoom(n, heap, 0);
    const region = this.#registerRegion(n, heap.flags);
    const d = new DedicatedRegion(heap.policy, region, n);
    const block = new Block(this.#owner, d, BlockKind.Dedicated, d, 0, 0, n, n, stack);
    d.block = block;
    this.#dedicated.add(d);
    this.#account(n);
    this.#dedicatedBytes += n;
    this.#dedicatedInUse += n;
    return block;
  }

  #registerRegion(length: number, flags: number): Region {
    const r = this.#registrar;
    let own: Uint8Array | undefined;
    if (r.allocate === undefined) {
      // Without allocate() the memory is ours to create, and an ArrayBuffer has a size limit.
      if (length > kMaxLength) {
        throw new AllocRegistrationError(
          'allocate',
          `cannot create ${length} bytes: more than the largest ArrayBuffer (${kMaxLength} bytes); give the registrar an allocate()`,
          undefined,
          false,
        );
      }
      try {
        own = new Uint8Array(length);
      } catch (err) {
        // A valid length that cannot be had now: out of memory, which may pass.
        throw new AllocRegistrationError(
          'allocate',
          `allocating ${length} bytes failed`,
          err,
          true,
        );
      }
    }
    let region: Region;
    try {
      region =
        own === undefined
          ? (r.allocate as NonNullable<Registrar['allocate']>)(length, flags)
          : r.register(own, flags);
    } catch (err) {
      throw registrationError(own === undefined ? 'allocate' : 'register', length, err);
    }
    this.#registrations++;
    try {
      return checkRegion(r, region, length, 'allocate');
    } catch (err) {
      this.#deregistrations++;
      throw err;
    }
  }

  /** Deregisters; returns (does not throw) a registrar failure. */
  #deregister(region: Region, bytes: number): AllocError | undefined {
    this.#deregistrations++;
    try {
      this.#registrar.deregister(region);
      return undefined;
    } catch (err) {
      this.#deregistrationFailures++;
      return registrationError('deregister', bytes, err);
    }
  }

  /**
   * HeapHost.arenaEmptied: keeps `retainEmptyArenas` empty arenas per policy, retires the
   * one empty the longest. Not the one that just emptied: it is the one in use (a 16 MiB
   * block's own arena, emptied after every 16 MiB message, was re-registered per message
   * while an idle small arena stayed), and an empty arena takes blocks of any size again.
   */
  #arenaEmptied(heap: Heap, arena: Arena): void {
    if (this.#state !== 'open' || arena.pinned) return;
    arena.emptiedSeq = ++this.#emptiedSeq;
    let empty = 0;
    let oldest: Arena | undefined;
    for (const a of heap.arenas) {
      if (a.usedPages !== 0 || a.pinned) continue;
      empty++;
      if (oldest === undefined || a.emptiedSeq < oldest.emptiedSeq) oldest = a;
    }
    if (empty > this.#retainEmpty && oldest !== undefined) this.#deferred ??= this.#retire(oldest);
  }

  /** Takes an arena without live blocks out of its heap and deregisters it (unless told not to). */
  #retire(arena: Arena, deregister = true): AllocError | undefined {
    if (arena.retired) return undefined;
    this.#heapOf(arena).removeArena(arena);
    this.#account(-arena.byteLength);
    return deregister ? this.#deregister(arena.region, arena.byteLength) : undefined;
  }

  /**
   * Empty slabs back to arenas, then empty arenas deregistered: with `need`, unpinned ones
   * until `need` more bytes fit under the limit (the family's, with `forFamily`: a pool
   * giving back for another); without, all of them, pinned too.
   */
  #reclaim(
    need?: number,
    forFamily?: RegistrationBudget<RegisteredAllocator>,
  ): AllocError | undefined {
    let first: AllocError | undefined;
    for (const heap of this.#heaps) heap?.trimSlabs();
    for (const heap of this.#heaps) {
      if (heap === undefined) continue;
      for (const arena of [...heap.arenas]) {
        if (need !== undefined && (forFamily?.fits(need) ?? this.#fits(need))) return first;
        if (arena.usedPages !== 0 || (arena.pinned && need !== undefined)) continue;
        first ??= this.#retire(arena);
      }
    }
    return first;
  }

  #takeDeferred(): AllocError | undefined {
    const err = this.#deferred;
    this.#deferred = undefined;
    return err;
  }

  #finishClose(): void {
    this.#state = 'closed';
    // Out of the family once nothing is registered: the owner forgets a closed pool.
    this.#budget.members.delete(this);
    if (this.#parent !== undefined) this.#parent.#children.delete(this);
    for (let i = 0; i < this.#heaps.length; i++) this.#heaps[i] = undefined;
    this.#released.length = 0;
  }

  #remember(block: Block): void {
    if (this.#released.length < RING) this.#released.push(block);
    else this.#released[this.#releasedPos] = block;
    this.#releasedPos = (this.#releasedPos + 1) % RING;
  }

  /** HeapHost.corrupted: names the released block whose memory was written. */
  #corrupted(arena: Arena, offset: number): never {
    let culprit: Block | undefined;
    const ring = this.#released;
    for (let i = 1; i <= ring.length && culprit === undefined; i++) {
      const b = ring[(this.#releasedPos - i + ring.length) % ring.length];
      if (b === undefined || I.region(b) !== arena) continue;
      const start = I.offset(b);
      if (offset >= start && offset < start + b.capacity) culprit = b;
    }
    throw new AllocUseAfterReleaseError(
      `memory at 0x${(arena.addr + offset).toString(16)} was written after its release` +
        (culprit === undefined ? '' : ` (a block of ${culprit.length} bytes)`),
      arena.addr + offset,
      culprit?.allocatedAt,
      culprit === undefined ? undefined : I.releasedAt(culprit),
    );
  }
}

function foreign(): AllocError {
  return new AllocError('ERR_ALLOC_FOREIGN_BLOCK', 'block is not live in this allocator');
}

function roundUpPage(n: number): number {
  return Math.ceil(n / PAGE_BYTES) * PAGE_BYTES;
}

function floorPage(n: number): number {
  return Math.floor(n / PAGE_BYTES) * PAGE_BYTES;
}
