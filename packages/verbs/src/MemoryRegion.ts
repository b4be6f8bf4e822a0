import { RdmaError } from './errors.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import { checkCreate, type kCreate } from './internal/symbols.js';
import { checkInt } from './internal/validate.js';
import type { Sge } from './types.js';

/**
 * Registered memory. `bytes` is a view of the registered memory itself (no copy); for
 * `regMr` it is a view of the caller's buffer. `lkey`/`rkey` name it in work requests.
 */
export class MemoryRegion extends Resource {
  readonly addr: number;
  readonly length: number;
  readonly lkey: number;
  readonly rkey: number;
  readonly access: number;
  readonly #bytes: Uint8Array;
  readonly #native: NativeDevice;
  readonly #handle: number;

  /** Memory regions come from `pd.allocMr()` and `pd.regMr()`. */
  constructor(
    key: typeof kCreate,
    parent: Resource,
    native: NativeDevice,
    handle: number,
    bytes: Uint8Array,
    addr: number,
    keys: { lkey: number; rkey: number },
    access: number,
  ) {
    checkCreate(key, 'pd.allocMr() or pd.regMr()');
    super(parent);
    this.#native = native;
    this.#handle = handle;
    this.#bytes = bytes;
    this.addr = addr;
    this.length = bytes.byteLength;
    this.lkey = keys.lkey;
    this.rkey = keys.rkey;
    this.access = access;
  }

  /** The registered bytes. Throws ERR_RDMA_MR_INVALID after deregistration. */
  get bytes(): Uint8Array {
    if (this.closed) throw new RdmaError('ERR_RDMA_MR_INVALID', 'memory region was deregistered');
    return this.#bytes;
  }

  /** A scatter/gather element over [offset, offset + length) of this region. */
  sge(offset = 0, length = this.length - offset): Sge {
    if (this.closed) throw new RdmaError('ERR_RDMA_MR_INVALID', 'memory region was deregistered');
    checkInt('offset', offset, 0, this.length);
    checkInt('length', length, 0, this.length - offset);
    return { addr: this.addr + offset, length, lkey: this.lkey };
  }

  /** Same as close(): invalidates the keys; later work requests using them fail. */
  deregister(): void {
    this.close();
  }

  protected kind(): 'memory region' {
    return 'memory region';
  }

  protected release(): void {
    this.#native.deregMr(this.#handle);
  }
}
