import { Block, BlockSlice } from '@rdmajs/allocator';
import { SendWrList } from '@rdmajs/verbs';
import { MuxError } from './errors.js';

/** Largest single READ of a list (one work request; the verbs message limit is 2^31). */
export const MAX_READ_ITEM_BYTES = 0x7fffffff;
/** Most entries a ReadList holds. */
export const MAX_READ_LIST = 1 << 16;

/** An entry's numbers are usable: offsets safe integers ≥ 0, length in 1..MAX_READ_ITEM_BYTES. */
function validEntry(remoteOffset: number, length: number, intoOffset: number): boolean {
  return (
    Number.isSafeInteger(remoteOffset) &&
    remoteOffset >= 0 &&
    Number.isSafeInteger(length) &&
    length >= 1 &&
    length <= MAX_READ_ITEM_BYTES &&
    Number.isSafeInteger(intoOffset) &&
    intoOffset >= 0
  );
}

/** add()'s error for a bad number (the length or an offset), built only when it throws. */
function numberError(remoteOffset: number, length: number): MuxError {
  if (!Number.isSafeInteger(remoteOffset) || remoteOffset < 0)
    return new MuxError('ERR_MUX_INVALID_ARG', 'remoteOffset must be a safe integer ≥ 0');
  if (!Number.isSafeInteger(length) || length < 1 || length > MAX_READ_ITEM_BYTES)
    return new MuxError('ERR_MUX_INVALID_ARG', `length must be 1..${MAX_READ_ITEM_BYTES}`);
  return new MuxError('ERR_MUX_INVALID_ARG', 'intoOffset must be a safe integer ≥ 0');
}

/** add()'s error for a destination range past the destination's end. */
function rangeError(intoOffset: number, length: number, limit: number): MuxError {
  return new MuxError(
    'ERR_MUX_READ_RANGE',
    `into: ${length} bytes at ${intoOffset} exceed its ${limit} bytes`,
  );
}

function releasedError(): MuxError {
  return new MuxError('ERR_MUX_READ_RANGE', 'into: the block is released');
}

/** Most destinations of one addBatch(). */
const MAX_BATCH_DESTINATIONS = 8;

/**
 * A reusable batch of one-sided reads for `connection.read()`: each entry copies `length`
 * bytes at `remoteOffset` of a remote region into registered memory of this side. Made once
 * with its capacity; add() encodes each entry's READ into a verbs SendWrList (the addon's
 * own layout), so read() posts the list as it is, with no WR object per entry and nothing
 * allocated per call. Refilled with `clear()` + `add()`. While a read() of it is in flight
 * the list is `busy` and cannot be changed (its work requests are posted as they are).
 */
export class ReadList {
  readonly capacity: number;
  #count = 0;
  /** The block of the last add() (undefined after clear()), its address and key. */
  #lastBlock: Block | undefined = undefined;
  #lastAddr = 0;
  #lastLkey = 0;
  /** addBatch()'s destinations, resolved once per call. */
  readonly #dests = {
    block: new Array<Block | undefined>(MAX_BATCH_DESTINATIONS).fill(undefined),
    addr: new Float64Array(MAX_BATCH_DESTINATIONS),
    lkey: new Float64Array(MAX_BATCH_DESTINATIONS),
    length: new Float64Array(MAX_BATCH_DESTINATIONS),
  };
  /** @internal set by the connection while a read() of this list is in flight. */
  busy = false;
  /** @internal entry i's offset in the remote region. */
  readonly remoteOffsets: Float64Array;
  /** @internal entry i's destination block (checked live and ours at read()). */
  readonly blocks: (Block | undefined)[];
  /** @internal entry i's length in bytes. */
  readonly lengths: Float64Array;
  /** @internal the entries' READs (remoteAddr and rkey set at read(), wrId and signaled at post). */
  readonly wrs: SendWrList;

  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1 || capacity > MAX_READ_LIST)
      throw new MuxError('ERR_MUX_INVALID_ARG', `ReadList capacity must be 1..${MAX_READ_LIST}`);
    this.capacity = capacity;
    this.remoteOffsets = new Float64Array(capacity);
    this.lengths = new Float64Array(capacity);
    this.blocks = new Array<Block | undefined>(capacity).fill(undefined);
    this.wrs = new SendWrList(capacity);
  }

  /** Entries added since the last clear(). */
  get length(): number {
    return this.#count;
  }

  /** Empties the list (its objects are kept for the next entries). */
  clear(): void {
    this.#checkIdle();
    this.blocks.fill(undefined, 0, this.#count);
    this.#dests.block.fill(undefined); // no released block stays referenced
    this.#count = 0;
    this.wrs.clear();
    this.#lastBlock = undefined;
  }

  /**
   * Adds a read of `length` (≥ 1) bytes at `remoteOffset` of the region into `into` at
   * `intoOffset`. The destination is checked here (inside its block or slice, block live);
   * the remote range is checked against the descriptor at read(). Throws ERR_MUX_INVALID_ARG
   * (bad numbers, list full or busy) or ERR_MUX_READ_RANGE (outside the destination).
   */
  add(remoteOffset: number, length: number, into: Block | BlockSlice, intoOffset = 0): this {
    const i = this.#count;
    if (this.busy || i === this.capacity) throw this.#stateError();
    if (!validEntry(remoteOffset, length, intoOffset)) throw numberError(remoteOffset, length);
    // The block of the last add() (a fetch adds many entries into one block) is still checked live.
    let at = intoOffset;
    if (into !== this.#lastBlock) at += this.#resolve(into);
    else if ((into as Block).released) throw releasedError();
    if (intoOffset + length > into.length) throw rangeError(intoOffset, length, into.length);
    this.wrs.addRead(this.#lastAddr + at, length, this.#lastLkey, 0, 0);
    this.#count = i + 1;
    this.remoteOffsets[i] = remoteOffset;
    this.lengths[i] = length;
    this.blocks[i] = this.#lastBlock;
    return this;
  }

  /**
   * Adds `count` entries at once: entry j reads `lengths[j]` bytes at `remoteOffsets[j]` into
   * `into[which[j]]` at `intoOffsets[j]` — add() for each, in order, but each destination is
   * resolved and checked live once, not per entry (a one-sided fetch adds ≈ 3 entries a key
   * into two blocks). Every entry's numbers and its range in its destination are checked as
   * add() checks them; on a throw the entries before the bad one stay added, as with add().
   */
  addBatch(
    count: number,
    remoteOffsets: ArrayLike<number>,
    lengths: ArrayLike<number>,
    intoOffsets: ArrayLike<number>,
    which: ArrayLike<number>,
    into: readonly (Block | BlockSlice)[],
  ): this {
    const start = this.#count;
    if (this.busy) throw this.#stateError();
    if (
      !(Number.isSafeInteger(count) && count >= 0) ||
      count > remoteOffsets.length ||
      count > lengths.length ||
      count > intoOffsets.length ||
      count > which.length
    )
      throw new MuxError('ERR_MUX_INVALID_ARG', 'addBatch: count exceeds the arrays');
    if (count > this.capacity - start) throw this.#stateError(true);
    const nd = into.length;
    if (nd > MAX_BATCH_DESTINATIONS)
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        `addBatch: at most ${MAX_BATCH_DESTINATIONS} destinations`,
      );
    // Per destination, once: its block (checked live), base, address, key and length.
    const d = this.#dests;
    for (let k = 0; k < nd; k++) {
      const dest = into[k] as Block | BlockSlice;
      const base = this.#resolve(dest);
      d.block[k] = this.#lastBlock;
      d.addr[k] = this.#lastAddr + base;
      d.lkey[k] = this.#lastLkey;
      d.length[k] = dest.length;
    }
    const wrs = this.wrs;
    const blocks = this.blocks;
    const offs = this.remoteOffsets;
    const lens = this.lengths;
    for (let j = 0; j < count; j++) {
      const remoteOffset = remoteOffsets[j] as number;
      const length = lengths[j] as number;
      const intoOffset = intoOffsets[j] as number;
      const k = which[j] as number;
      if (!validEntry(remoteOffset, length, intoOffset)) throw numberError(remoteOffset, length);
      if (!(k >= 0 && k < nd && k === (k | 0)))
        throw new MuxError('ERR_MUX_INVALID_ARG', `addBatch: entry ${j} names destination ${k}`);
      const limit = d.length[k] as number;
      if (intoOffset + length > limit) throw rangeError(intoOffset, length, limit);
      wrs.addRead((d.addr[k] as number) + intoOffset, length, d.lkey[k] as number, 0, 0);
      const i = start + j;
      this.#count = i + 1;
      offs[i] = remoteOffset;
      lens[i] = length;
      blocks[i] = d.block[k];
    }
    return this;
  }

  /**
   * Makes `into`'s block the last one (checked live; its address and key read once: each
   * read asks the allocator whether the registration is still there). Returns the
   * destination's offset in its block.
   */
  #resolve(into: Block | BlockSlice): number {
    let block: Block;
    let base: number;
    if (into instanceof BlockSlice) {
      block = into.block;
      base = into.offset;
    } else if (into instanceof Block) {
      block = into;
      base = 0;
    } else {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'into must be a Block or BlockSlice');
    }
    if (block.released) throw releasedError();
    if (block !== this.#lastBlock) {
      this.#lastAddr = block.addr;
      this.#lastLkey = block.lkey;
      this.#lastBlock = block;
    }
    return base;
  }

  #stateError(overflow = false): MuxError {
    return this.busy
      ? new MuxError('ERR_MUX_INVALID_ARG', 'ReadList is in use by a read()')
      : new MuxError(
          'ERR_MUX_INVALID_ARG',
          `ReadList is full (${this.capacity} entries${overflow ? ', the batch does not fit' : ''})`,
        );
  }

  #checkIdle(): void {
    if (this.busy) throw new MuxError('ERR_MUX_INVALID_ARG', 'ReadList is in use by a read()');
  }
}
