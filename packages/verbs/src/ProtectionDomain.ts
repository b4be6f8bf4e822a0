import { CompletionQueue } from './CompletionQueue.js';
import type { DeviceContext } from './Device.js';
import { RdmaError } from './errors.js';
import { Resource } from './internal/lifecycle.js';
import { checkCreate, kCreate, kHandle } from './internal/symbols.js';
import { checkInt, describe, invalid, optInt, readOptions } from './internal/validate.js';
import { MemoryRegion } from './MemoryRegion.js';
import { QueuePair } from './QueuePair.js';
import { SharedReceiveQueue } from './SharedReceiveQueue.js';
import { Access } from './types.js';

export interface CreateQpOptions {
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  srq?: SharedReceiveQueue;
  maxSendWr?: number;
  maxRecvWr?: number;
  maxSendSge?: number;
  maxRecvSge?: number;
  maxInlineData?: number;
  /** ibverbs: the port the QP uses (default: the device's first port). */
  port?: number;
  /** ibverbs: the local GID index (default: the port's RoCE v2 IPv4 GID). */
  gidIndex?: number;
}

const QP_OPTIONS = [
  'sendCq',
  'recvCq',
  'srq',
  'maxSendWr',
  'maxRecvWr',
  'maxSendSge',
  'maxRecvSge',
  'maxInlineData',
  'port',
  'gidIndex',
] as const;

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
  readonly #ctx: DeviceContext;

  /** Protection domains come from `device.allocPd()`. */
  constructor(key: typeof kCreate, parent: Resource, ctx: DeviceContext) {
    checkCreate(key, 'device.allocPd()');
    super(parent);
    this.#ctx = ctx;
  }

  /** The largest registration the device accepts, as a JS integer. */
  get #maxMrBytes(): number {
    const max = this.#ctx.driver.info.limits.maxMrSize;
    return max > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(max);
  }

  /** Allocates `length` bytes of registered memory (zero-filled), exposed as `mr.bytes`. */
  allocMr(length: number, access: number): MemoryRegion {
    this.assertOpen();
    checkInt('length', length, 1, this.#maxMrBytes);
    const a = checkAccess(access);
    const native = this.#ctx.driver.native;
    const { handle, buffer, addr, lkey, rkey } = native.allocMr(length, a);
    const keys = { lkey, rkey };
    return new MemoryRegion(kCreate, this, native, handle, new Uint8Array(buffer), addr, keys, a);
  }

  /**
   * Registers memory the application already owns, in place (no copy). The buffer is
   * kept alive until the region is deregistered.
   */
  regMr(buffer: ArrayBuffer | ArrayBufferView, access: number): MemoryRegion {
    this.assertOpen();
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
      throw invalid(`regMr takes an ArrayBuffer or a view of one, got ${describe(buffer)}`);
    }
    const a = checkAccess(access);
    if (length === 0) throw invalid('cannot register an empty buffer');
    if (length > this.#maxMrBytes)
      throw new RdmaError(
        'ERR_RDMA_OUT_OF_RANGE',
        `cannot register ${length} bytes: the device's maximum is ${this.#maxMrBytes}`,
      );
    // A resizable buffer can shrink under the registration: refuse it.
    if ((ab as ArrayBuffer & { resizable?: boolean }).resizable) {
      throw invalid('cannot register a resizable ArrayBuffer');
    }
    const native = this.#ctx.driver.native;
    const { handle, addr, lkey, rkey } = native.regMr(ab, offset, length, a);
    return new MemoryRegion(
      kCreate,
      this,
      native,
      handle,
      new Uint8Array(ab, offset, length),
      addr,
      { lkey, rkey },
      a,
    );
  }

  createQp(options: CreateQpOptions): QueuePair {
    this.assertOpen();
    if (options === undefined) throw invalid('createQp needs { sendCq, recvCq }');
    const o = readOptions('createQp options', options, QP_OPTIONS);
    const { sendCq, recvCq, srq } = o;
    for (const [name, cq] of [
      ['sendCq', sendCq],
      ['recvCq', recvCq],
    ] as const) {
      if (!(cq instanceof CompletionQueue))
        throw invalid(`${name} must be a CompletionQueue, got ${describe(cq)}`);
      if (cq.closed) throw new RdmaError('ERR_RDMA_CLOSED', `${name} is closed`);
      if (this.#ctx.cqs.get(cq[kHandle]) !== cq) throw invalid(`${name} belongs to another device`);
    }
    if (srq !== undefined) {
      if (!(srq instanceof SharedReceiveQueue))
        throw invalid(`srq must be a SharedReceiveQueue, got ${describe(srq)}`);
      if (srq.closed) throw new RdmaError('ERR_RDMA_CLOSED', 'srq is closed');
      if (srq.pd !== this) throw invalid('srq belongs to another protection domain');
    }
    const scq = sendCq as CompletionQueue;
    const rcq = recvCq as CompletionQueue;
    const shared = srq as SharedReceiveQueue | undefined;
    const L = this.#ctx.driver.info.limits;
    const caps = {
      maxSendWr: optInt('maxSendWr', o.maxSendWr, 1, L.maxQpWr, 64),
      maxRecvWr: shared ? 0 : optInt('maxRecvWr', o.maxRecvWr, 1, L.maxQpWr, 64),
      maxSendSge: optInt('maxSendSge', o.maxSendSge, 1, L.maxSge, 4),
      maxRecvSge: shared ? shared.maxSge : optInt('maxRecvSge', o.maxRecvSge, 1, L.maxSge, 4),
      maxInlineData: optInt('maxInlineData', o.maxInlineData, 0, L.maxInlineData, 64),
    };
    const path = this.#ctx.driver.checkPath({
      ...(o.port === undefined ? {} : { port: o.port as number }),
      ...(o.gidIndex === undefined ? {} : { gidIndex: o.gidIndex as number }),
    });
    const handle = this.#ctx.driver.native.createQp(
      scq[kHandle],
      rcq[kHandle],
      shared ? shared[kHandle] : -1,
      caps.maxSendWr,
      caps.maxRecvWr,
      caps.maxSendSge,
      caps.maxRecvSge,
      caps.maxInlineData,
    );
    return new QueuePair(kCreate, this, this.#ctx, {
      handle,
      caps,
      path,
      sendCq: scq,
      recvCq: rcq,
      srq: shared,
    });
  }

  createSrq(options?: { maxWr?: number; maxSge?: number }): SharedReceiveQueue {
    this.assertOpen();
    const o = readOptions('createSrq options', options, ['maxWr', 'maxSge']);
    const L = this.#ctx.driver.info.limits;
    const maxWr = optInt('maxWr', o.maxWr, 1, L.maxSrqWr, 256);
    const maxSge = optInt('maxSge', o.maxSge, 1, L.maxSge, 4);
    const native = this.#ctx.driver.native;
    const handle = native.createSrq(maxWr, maxSge);
    return new SharedReceiveQueue(
      kCreate,
      this,
      this.#ctx.driver,
      handle,
      maxWr,
      maxSge,
      this.#ctx.srqs,
    );
  }

  protected kind(): 'protection domain' {
    return 'protection domain';
  }

  protected release(): void {}
}
