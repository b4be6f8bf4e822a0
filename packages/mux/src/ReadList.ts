import { Block, BlockSlice } from '@rdmajs/allocator';
import { SendWrList } from '@rdmajs/verbs';
import { MuxError } from './errors.js';

/** Largest single READ of a list (one work request; the verbs message limit is 2^31). */
export const MAX_READ_ITEM_BYTES = 0x7fffffff;
/** Most entries a ReadList holds. */
export const MAX_READ_LIST = 1 << 16;

/** add()'s error for a bad number (the length or an offset), built only when it throws. */
function numberError(remoteOffset: number, length: number): MuxError {
  if (!Number.isSafeInteger(remoteOffset) || remoteOffset < 0)
    return new MuxError('ERR_MUX_INVALID_ARG', 'remoteOffset must be a safe integer ≥ 0');
  if (!Number.isSafeInteger(length) || length < 1 || length > MAX_READ_ITEM_BYTES)
    return new MuxError('ERR_MUX_INVALID_ARG', `length must be 1..${MAX_READ_ITEM_BYTES}`);
  return new MuxError('ERR_MUX_INVALID_ARG', 'intoOffset must be a safe integer ≥ 0');
}

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
    if (
      !(
        Number.isSafeInteger(remoteOffset) &&
        remoteOffset >= 0 &&
        Number.isSafeInteger(length) &&
        length >= 1 &&
        length <= MAX_READ_ITEM_BYTES &&
        Number.isSafeInteger(intoOffset) &&
        intoOffset >= 0
      )
    )
      throw numberError(remoteOffset, length);
    // The block and the destination's place in it: a Block (the common case) first.
    let block: Block;
    let at: number;
    if (into === this.#lastBlock) {
      block = into as Block;
      at = intoOffset;
    } else if (into instanceof BlockSlice) {
      block = into.block;
      at = into.offset + intoOffset;
    } else if (into instanceof Block) {
      block = into;
      at = intoOffset;
    } else {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'into must be a Block or BlockSlice');
    }
    if (block.released) throw new MuxError('ERR_MUX_READ_RANGE', 'into: the block is released');
    if (intoOffset + length > into.length)
      throw new MuxError(
        'ERR_MUX_READ_RANGE',
        `into: ${length} bytes at ${intoOffset} exceed its ${into.length} bytes`,
      );
    // A fetch adds many entries into one block: its address and key are read once per fill
    // (each read asks the allocator whether the registration is still there).
    if (block !== this.#lastBlock) {
      this.#lastAddr = block.addr;
      this.#lastLkey = block.lkey;
      this.#lastBlock = block;
    }
    this.wrs.addRead(this.#lastAddr + at, length, this.#lastLkey, 0, 0);
    this.#count = i + 1;
    this.remoteOffsets[i] = remoteOffset;
    this.lengths[i] = length;
    this.blocks[i] = block;
    return this;
  }

  #stateError(): MuxError {
    return this.busy
      ? new MuxError('ERR_MUX_INVALID_ARG', 'ReadList is in use by a read()')
      : new MuxError('ERR_MUX_INVALID_ARG', `ReadList is full (${this.capacity} entries)`);
  }

  #checkIdle(): void {
    if (this.busy) throw new MuxError('ERR_MUX_INVALID_ARG', 'ReadList is in use by a read()');
  }
}
