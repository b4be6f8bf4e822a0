import type { AccessPolicy } from './AccessPolicy.js';
import { AllocError, AllocUseAfterReleaseError, closedError } from './errors.js';
import { checkRange, rest } from './internal/validate.js';

/**
 * A scatter/gather element: the same shape and meaning as `Sge` of @rdmajs/verbs (a range
 * of registered memory for a work request's `sgList`), copied so no verbs import is needed.
 */
export interface Sge {
  addr: number;
  length: number;
  lkey: number;
}

/**
 * 'live' until released; 'revoked' when the allocator was destroyed, or its registrar (PD)
 * closed, while it was live.
 */
export type BlockState = 'live' | 'released' | 'revoked';

/** Where a block's memory lives: an arena or a dedicated region. Internal. */
export interface BlockRegion {
  readonly addr: number;
  readonly lkey: number;
  readonly rkey: number;
  readonly bytes: Uint8Array;
  readonly access: AccessPolicy;
}

/** Where a block came from, so release needs no type tests. Internal. */
export const BlockKind = { Small: 0, Large: 1, Dedicated: 2 } as const;
export type BlockKind = (typeof BlockKind)[keyof typeof BlockKind];

/** What a block calls back. Internal. */
export interface BlockOwner {
  releaseBlock(block: Block): void;
  /** True once the memory is gone under every block (the registrar closed); revokes them. */
  lost(): boolean;
}

/** Internal accessors, for the allocator (not exported from the package). */
export interface BlockInternals {
  /** A real block (brand check: `instanceof` is fooled by Object.create(Block.prototype)). */
  is(x: unknown): x is Block;
  owner(b: Block): BlockOwner;
  region(b: Block): BlockRegion;
  kind(b: Block): BlockKind;
  home(b: Block): unknown;
  index(b: Block): number;
  offset(b: Block): number;
  markReleased(b: Block, releasedAt: string | undefined): void;
  revoke(b: Block): void;
  releasedAt(b: Block): string | undefined;
}

let internals: BlockInternals | undefined;

/**
 * Registered memory handed out by a `RegisteredAllocator`. `bytes` is a view of the
 * registered arena itself, so what the application writes there is what RDMA sends: no
 * copy. A block is also a scatter/gather element (`addr`, `length`, `lkey`), so it can go
 * straight into a work request's `sgList`; `slice` and `sge` give sub-ranges without copies.
 *
 * After `release()` every accessor throws ERR_ALLOC_USE_AFTER_RELEASE and a second
 * `release()` throws ERR_ALLOC_DOUBLE_RELEASE. Block objects are never recycled, so a stale
 * reference can never reach a later block (only views taken from it still alias the memory;
 * debug mode detects writes through them).
 */
export class Block {
  readonly #owner: BlockOwner;
  readonly #region: BlockRegion;
  readonly #kind: BlockKind;
  readonly #home: unknown;
  readonly #index: number;
  readonly #offset: number;
  readonly #length: number;
  readonly #capacity: number;
  readonly #allocatedAt: string | undefined;
  #state: BlockState = 'live';
  #view: Uint8Array | undefined = undefined;
  #releasedAt: string | undefined = undefined;

  static {
    internals = {
      is: (x): x is Block => typeof x === 'object' && x !== null && #owner in x,
      owner: (b) => b.#owner,
      region: (b) => b.#region,
      kind: (b) => b.#kind,
      home: (b) => b.#home,
      index: (b) => b.#index,
      offset: (b) => b.#offset,
      markReleased: (b, at) => {
        b.#state = 'released';
        b.#releasedAt = at;
        b.#view = undefined;
      },
      revoke: (b) => {
        b.#state = 'revoked';
        b.#view = undefined;
      },
      releasedAt: (b) => b.#releasedAt,
    };
  }

  /** @internal Blocks come from `RegisteredAllocator.alloc`. */
  constructor(
    owner: BlockOwner,
    region: BlockRegion,
    kind: BlockKind,
    home: unknown,
    index: number,
    offset: number,
    length: number,
    capacity: number,
    allocatedAt: string | undefined,
  ) {
    this.#owner = owner;
    this.#region = region;
    this.#kind = kind;
    this.#home = home;
    this.#index = index;
    this.#offset = offset;
    this.#length = length;
    this.#capacity = capacity;
    this.#allocatedAt = allocatedAt;
  }

  /** Bytes requested; `bytes.length`. Readable in every state. */
  get length(): number {
    return this.#length;
  }

  /** Bytes the block occupies (its size class, or whole pages). Readable in every state. */
  get capacity(): number {
    return this.#capacity;
  }

  get state(): BlockState {
    return this.#state;
  }

  get released(): boolean {
    return this.#state !== 'live';
  }

  /** The access policy of the arena the block lives in. */
  get access(): AccessPolicy {
    return this.#region.access;
  }

  /** Allocation stack, captured in debug mode only. */
  get allocatedAt(): string | undefined {
    return this.#allocatedAt;
  }

  /** Address of `bytes[0]` for work requests. */
  get addr(): number {
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    return this.#region.addr + this.#offset;
  }

  get lkey(): number {
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    return this.#region.lkey;
  }

  /** Remote key of the arena; a peer can use it only if the block's access policy allows. */
  get rkey(): number {
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    return this.#region.rkey;
  }

  /** View of the block's registered memory (created on first use, then the same object). */
  get bytes(): Uint8Array {
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    let view = this.#view;
    if (view === undefined) {
      const arena = this.#region.bytes;
      view = new Uint8Array(arena.buffer, arena.byteOffset + this.#offset, this.#length);
      this.#view = view;
    }
    return view;
  }

  /** A scatter/gather element over [offset, offset + length) of the block. */
  sge(offset = 0, length?: number): Sge {
    const len = rest(offset, length, this.#length);
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    this.#checkRange(offset, len);
    return {
      addr: this.#region.addr + this.#offset + offset,
      length: len,
      lkey: this.#region.lkey,
    };
  }

  /**
   * A zero-copy sub-range [offset, offset + length) (unlike `Uint8Array.slice`, nothing is
   * copied): an Sge with a `bytes` view, valid while the block is live.
   */
  slice(offset: number, length?: number): BlockSlice {
    const len = rest(offset, length, this.#length);
    if (this.#state !== 'live' || this.#owner.lost()) this.#dead();
    this.#checkRange(offset, len);
    return new BlockSlice(this, offset, len);
  }

  /** Gives the block back to its allocator. A second call throws ERR_ALLOC_DOUBLE_RELEASE. */
  release(): void {
    if (this.#state === 'live' && !this.#owner.lost()) {
      this.#owner.releaseBlock(this);
      return;
    }
    if (this.#state === 'revoked') return; // reclaimed by destroy() or a closed PD: harmless
    throw new AllocError(
      'ERR_ALLOC_DOUBLE_RELEASE',
      `block of ${this.#length} bytes released twice${stackNote(this.#allocatedAt, this.#releasedAt)}`,
    );
  }

  #checkRange(offset: number, length: number): void {
    checkRange(offset, length, this.#length, 'block');
  }

  #dead(): never {
    if (this.#state === 'revoked') {
      throw closedError('block', 'its allocator was destroyed or its protection domain closed');
    }
    throw new AllocUseAfterReleaseError(
      `block of ${this.#length} bytes used after release${stackNote(this.#allocatedAt, this.#releasedAt)}`,
      this.#region.addr + this.#offset,
      this.#allocatedAt,
      this.#releasedAt,
    );
  }
}

/**
 * A zero-copy sub-range of a block: an Sge (`addr`, `length`, `lkey`) plus `rkey` and a
 * `bytes` view. Valid while its block is live; afterwards its accessors throw like the block's.
 */
export class BlockSlice implements Sge {
  readonly block: Block;
  /** Offset within the block. */
  readonly offset: number;
  readonly length: number;
  #view: Uint8Array | undefined = undefined;

  /** @internal Obtained from `block.slice()` (which checks the range). */
  constructor(block: Block, offset: number, length: number) {
    this.block = block;
    this.offset = offset;
    this.length = length;
  }

  get addr(): number {
    return this.block.addr + this.offset;
  }

  get lkey(): number {
    return this.block.lkey;
  }

  get rkey(): number {
    return this.block.rkey;
  }

  get bytes(): Uint8Array {
    const whole = this.block.bytes; // throws once the block is released
    if (this.#view === undefined)
      this.#view = whole.subarray(this.offset, this.offset + this.length);
    return this.#view;
  }

  /** A plain scatter/gather element over [offset, offset + length) of this slice. */
  sge(offset = 0, length?: number): Sge {
    const len = rest(offset, length, this.length);
    this.#checkRange(offset, len);
    return this.block.sge(this.offset + offset, len);
  }

  /** A further sub-range, relative to this slice. */
  slice(offset: number, length?: number): BlockSlice {
    const len = rest(offset, length, this.length);
    this.#checkRange(offset, len);
    return this.block.slice(this.offset + offset, len);
  }

  #checkRange(offset: number, length: number): void {
    checkRange(offset, length, this.length, 'slice');
  }
}

function stackNote(allocatedAt: string | undefined, releasedAt: string | undefined): string {
  let note = '';
  if (allocatedAt !== undefined) note += `\n  allocated at:\n${allocatedAt}`;
  if (releasedAt !== undefined) note += `\n  released at:\n${releasedAt}`;
  return note;
}

/** Accessors the allocator uses to manage blocks. Not exported from the package. */
export function blockInternals(): BlockInternals {
  return internals as BlockInternals;
}
