import type { Block } from '@rdmajs/allocator';
import { MuxError } from '../errors.js';
import type { ReadDescriptor } from '../ReadDescriptor.js';
import type { ReadList } from '../ReadList.js';

/**
 * Checks a one-sided read before anything is posted, and aims the list's work requests at
 * the region: a READ outside the peer's registration would fail the QP (and every channel on
 * it), and one into memory that is not live and ours would write where nothing expects it.
 * `peerIncarnation`: the peer's transport, from the setup; `ours(block)`: the block is
 * registered by this connection's protection domain (its allocator or peer pool).
 * Throws ERR_MUX_INVALID_ARG, ERR_MUX_STALE_DESCRIPTOR or ERR_MUX_READ_RANGE; on success
 * every entry's READ has its remote address and key (not yet its wrId or signaled flag).
 */
export function prepareRead(
  descriptor: ReadDescriptor,
  list: ReadList,
  peerIncarnation: bigint,
  ours: (block: Block) => boolean,
): void {
  if (descriptor === null || typeof descriptor !== 'object')
    throw new MuxError('ERR_MUX_INVALID_ARG', 'read: descriptor must be a ReadDescriptor');
  const { incarnation, addr, rkey, length } = descriptor;
  if (incarnation !== peerIncarnation) {
    throw new MuxError(
      'ERR_MUX_STALE_DESCRIPTOR',
      'read: the descriptor is of another incarnation of the peer (or of another peer)',
    );
  }
  if (
    !Number.isSafeInteger(addr) ||
    addr < 0 ||
    !Number.isSafeInteger(length) ||
    length < 1 ||
    !Number.isSafeInteger(addr + length) ||
    !Number.isSafeInteger(rkey) ||
    rkey < 0 ||
    rkey > 0xffffffff
  )
    throw new MuxError('ERR_MUX_INVALID_ARG', 'read: malformed descriptor');
  if (list.busy) throw new MuxError('ERR_MUX_INVALID_ARG', 'read: the list is in use by a read()');
  const n = list.length;
  const offsets = list.remoteOffsets;
  const lengths = list.lengths;
  const wrs = list.wrs;
  // A list's entries mostly land in one or two blocks (a fetch's scratch and rows, in turn):
  // the last two checked are not checked again.
  let checked: Block | undefined;
  let checked2: Block | undefined;
  for (let i = 0; i < n; i++) {
    const bytes = lengths[i] as number;
    const off = offsets[i] as number;
    if (off + bytes > length) {
      throw new MuxError(
        'ERR_MUX_READ_RANGE',
        `read: entry ${i} (${bytes} bytes at ${off}) is outside the region's ${length} bytes`,
      );
    }
    const block = list.blocks[i] as Block;
    if (block !== checked && block !== checked2) {
      if (block.released || !ours(block) || !registered(block)) {
        throw new MuxError(
          'ERR_MUX_READ_RANGE',
          `read: entry ${i}'s destination is released or not this connection's registered memory`,
        );
      }
      checked2 = checked;
      checked = block;
    }
    wrs.setRemote(i, addr + off, rkey);
  }
}

/**
 * The block's registration is still there. `released` alone does not say so: a block of an
 * allocator whose protection domain (or device) went away turns revoked only when one of its
 * keys or views is next read, and the list's entries were keyed when they were added.
 */
function registered(block: Block): boolean {
  try {
    return block.lkey >= 0;
  } catch {
    return false;
  }
}
