import { CompletionQueue } from './CompletionQueue.js';
import { RdmaError } from './errors.js';
import { Resource } from './internal/lifecycle.js';
import { checkInt, invalid, optInt } from './internal/validate.js';
import { MemoryRegion } from './MemoryRegion.js';
import { type QpContext, QueuePair } from './QueuePair.js';
import { SharedReceiveQueue } from './SharedReceiveQueue.js';
import { Access, type DeviceLimits } from './types.js';

export interface CreateQpOptions {
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  srq?: SharedReceiveQueue;
  maxSendWr?: number;
  maxRecvWr?: number;
  maxSendSge?: number;
  maxRecvSge?: number;
  maxInlineData?: number;
}

function checkAccess(access: unknown): number {
  const a = checkInt('access', access, 0, 15);
  // As ibv_reg_mr: remote write needs local write (EINVAL otherwise).
  if (a & (Access.RemoteWrite | Access.RemoteAtomic) && !(a & Access.LocalWrite)) {
    throw invalid('remote write or atomic access requires Access.LocalWrite');
  }
  return a;
}

/** A protection domain: owns memory regions, queue pairs and shared receive queues. */
export class ProtectionDomain extends Resource {
  readonly #ctx: QpContext;
  readonly #limits: DeviceLimits;

  /** @internal */
  constructor(parent: Resource, ctx: QpContext, limits: DeviceLimits) {
    super(parent);
    this.#ctx = ctx;
    this.#limits = limits;
  }

  /** Allocates `length` bytes of registered memory (zero-filled), exposed as `mr.bytes`. */
  allocMr(length: number, access: number): MemoryRegion {
    this.assertOpen();
    checkInt('length', length, 1, this.#limits.maxMrSize);
    const a = checkAccess(access);
    const [handle, ab, addr, lkey, rkey] = this.#ctx.native.allocMr(length, a);
    const keys = { lkey, rkey: rkey ?? lkey };
    return new MemoryRegion(this, this.#ctx.native, handle, new Uint8Array(ab), addr, keys, a);
  }

  /**
   * Registers memory the application already owns, in place (no copy). The buffer is
   * kept alive until the region is deregistered.
   */
  regMr(buffer: ArrayBuffer | ArrayBufferView, access: number): MemoryRegion {
    this.assertOpen();
    const a = checkAccess(access);
    let ab: ArrayBuffer;
    let offset = 0;
    let length: number;
    if (buffer instanceof ArrayBuffer) {
      ab = buffer;
      length = buffer.byteLength;
    } else if (ArrayBuffer.isView(buffer) && buffer.buffer instanceof ArrayBuffer) {
      ab = buffer.buffer;
      offset = buffer.byteOffset;
      length = buffer.byteLength;
    } else {
      throw invalid('regMr takes an ArrayBuffer or a view of one');
    }
    if (length === 0) throw invalid('cannot register an empty buffer');
    // A resizable buffer can shrink under the registration: refuse it.
    if ((ab as ArrayBuffer & { resizable?: boolean }).resizable) {
      throw invalid('cannot register a resizable ArrayBuffer');
    }
    const [handle, addr, lkey, rkey] = this.#ctx.native.regMr(ab, offset, length, a);
    return new MemoryRegion(
      this,
      this.#ctx.native,
      handle,
      new Uint8Array(ab, offset, length),
      addr,
      { lkey, rkey: rkey ?? lkey },
      a,
    );
  }

  createQp(options: CreateQpOptions): QueuePair {
    this.assertOpen();
    const { sendCq, recvCq, srq } = options ?? ({} as CreateQpOptions);
    for (const [name, cq] of [
      ['sendCq', sendCq],
      ['recvCq', recvCq],
    ] as const) {
      if (!(cq instanceof CompletionQueue)) throw invalid(`${name} must be a CompletionQueue`);
      if (cq.closed) throw new RdmaError('ERR_RDMA_CLOSED', `${name} is closed`);
      if (!this.#ctx.ownsCq(cq)) throw invalid(`${name} belongs to another device`);
    }
    if (srq !== undefined && (!(srq instanceof SharedReceiveQueue) || srq.closed))
      throw invalid('srq must be an open SharedReceiveQueue');
    const L = this.#limits;
    const caps = {
      maxSendWr: optInt('maxSendWr', options.maxSendWr, 1, L.maxQpWr, 64),
      maxRecvWr: srq ? 0 : optInt('maxRecvWr', options.maxRecvWr, 1, L.maxQpWr, 64),
      maxSendSge: optInt('maxSendSge', options.maxSendSge, 1, L.maxSge, 4),
      maxRecvSge: srq ? srq.maxSge : optInt('maxRecvSge', options.maxRecvSge, 1, L.maxSge, 4),
      maxInlineData: optInt('maxInlineData', options.maxInlineData, 0, L.maxInlineData, 64),
    };
    const handle = this.#ctx.native.createQp(
      sendCq.handle,
      recvCq.handle,
      srq ? srq.handle : -1,
      caps.maxSendWr,
      caps.maxRecvWr,
      caps.maxSendSge,
      caps.maxRecvSge,
      caps.maxInlineData,
    );
    return new QueuePair(this, this.#ctx, handle, caps, sendCq, recvCq, srq);
  }

  createSrq(options: { maxWr?: number; maxSge?: number } = {}): SharedReceiveQueue {
    this.assertOpen();
    const maxWr = optInt('maxWr', options.maxWr, 1, this.#limits.maxSrqWr, 256);
    const maxSge = optInt('maxSge', options.maxSge, 1, this.#limits.maxSge, 4);
    const handle = this.#ctx.native.createSrq(maxWr, maxSge);
    return new SharedReceiveQueue(this, this.#ctx.native, handle, maxWr, maxSge, this.#ctx.srqs);
  }

  protected kind(): string {
    return 'protection domain';
  }

  protected release(): void {}
}
