import { EventEmitter } from 'node:events';
import { CompletionQueue } from './CompletionQueue.js';
import { RdmaError } from './errors.js';
import { Resource } from './internal/lifecycle.js';
import {
  type IbvDeviceStatus,
  type IbvNativeDevice,
  type IbvStatus,
  loadAddon,
  type NativeDevice,
  type SoftNativeDevice,
} from './internal/native.js';
import { type LinkAddress, LinkClient, LinkServer } from './internal/TcpLink.js';
import { checkInt, invalid, optInt } from './internal/validate.js';
import { ProtectionDomain } from './ProtectionDomain.js';
import type { QpContext } from './QueuePair.js';
import type { DeviceInfo, ProviderName } from './types.js';

export interface OpenDeviceOptions {
  /** 'auto' (default) takes a real RDMA device when one exists, else soft. */
  provider?: 'auto' | ProviderName;
  name?: string;
  /**
   * Soft: how this device's QPs reach peers on the same host. 'auto' (default) uses
   * shared memory; 'tcp' uses the TCP link, as for peers on other hosts (for tests).
   */
  link?: 'auto' | 'tcp';
}

const EV_DOORBELL = 0;
const EV_QP_FATAL = 1;
const EV_CQ_ERR = 2;
const EV_SRQ_LIMIT = 3;
const EV_LINK = 4;
const EV_PORT = 5;

const PORT_EVENTS: Record<number, DeviceAsyncEvent['type']> = {
  8: 'DEVICE_FATAL',
  9: 'PORT_ACTIVE',
  10: 'PORT_ERR',
  11: 'LID_CHANGE',
  12: 'PKEY_CHANGE',
  18: 'GID_CHANGE',
};

/** Port and device events of an ibverbs device (ibv_get_async_event); port 0 = the device. */
export type DeviceAsyncEvent = {
  type: 'DEVICE_FATAL' | 'PORT_ACTIVE' | 'PORT_ERR' | 'LID_CHANGE' | 'PKEY_CHANGE' | 'GID_CHANGE';
  port: number;
};

function softInfo(): DeviceInfo {
  const l = loadAddon().softLimits();
  return {
    name: 'soft0',
    provider: 'soft',
    guid: l.bootId
      .replaceAll('-', '')
      .slice(0, 16)
      .replace(/(.{4})(?!$)/g, '$1:'),
    ports: [
      { port: 1, state: 'ACTIVE', activeMtu: 4096, linkLayer: 'Shared memory', lid: 0, gids: [] },
    ],
    limits: {
      maxQp: l.maxQp,
      maxQpWr: l.maxQpWr,
      maxSge: l.maxSge,
      maxCq: 1024,
      maxCqe: l.maxCqe,
      maxMr: l.maxMr,
      maxMrSize: l.maxMrSize,
      maxMsgSize: l.maxMsgSize,
      maxInlineData: l.maxInlineData,
      maxSrq: 1024,
      maxSrqWr: l.maxSrqWr,
    },
  };
}

const IBV_PORT_ACTIVE = 4;
const PORT_STATES = ['DOWN', 'DOWN', 'INIT', 'ARMED', 'ACTIVE', 'ACTIVE'] as const;

function ibvInfo(d: IbvDeviceStatus): DeviceInfo {
  const l = d.limits;
  const maxMsgSize = Math.min(...d.ports.map((p) => p.maxMsgSize), 2 ** 31);
  return {
    name: d.name,
    provider: 'ibverbs',
    guid: d.guid,
    ports: d.ports.map((p) => ({
      port: p.port,
      state: PORT_STATES[p.state] ?? 'DOWN',
      activeMtu: 128 << p.activeMtu,
      linkLayer: p.linkLayer,
      lid: p.lid,
      gids: p.gids.map((g) => g.gid),
      gidTable: p.gids,
    })),
    limits: {
      maxQp: l.maxQp,
      maxQpWr: l.maxQpWr,
      maxSge: l.maxSge,
      maxCq: l.maxCq,
      maxCqe: l.maxCqe,
      maxMr: l.maxMr,
      maxMrSize: l.maxMrSize,
      maxMsgSize,
      maxInlineData: l.maxInlineData,
      maxSrq: l.maxSrq,
      maxSrqWr: l.maxSrqWr,
    },
  };
}

/** What the ibverbs provider offers here (devices, or why there are none). */
export function ibverbsStatus(): IbvStatus {
  return loadAddon().ibvStatus();
}

/** Every device this host offers, with provider, ports and limits (like ibv_devinfo). */
export function listDevices(): DeviceInfo[] {
  return [...ibverbsStatus().devices.map(ibvInfo), softInfo()];
}

function ibverbsUnavailable(status: IbvStatus): RdmaError {
  const what = status.compiled ? 'no RDMA device was found' : 'it was not compiled in';
  return new RdmaError(
    'ERR_RDMA_PROVIDER_UNAVAILABLE',
    `the ibverbs provider is not available: ${what} (${status.reason ?? 'see rdmajs devices'}); provider: 'soft' is available on every host`,
  );
}

/**
 * Opens a device. 'auto' (the default) takes an ibverbs device when one exists (the first,
 * or the one named), else soft. The soft provider is always available.
 */
export function openDevice(options: OpenDeviceOptions = {}): Device {
  const provider = options.provider ?? 'auto';
  if (provider !== 'auto' && provider !== 'soft' && provider !== 'ibverbs') {
    throw invalid(`provider must be 'auto', 'soft' or 'ibverbs', got ${String(provider)}`);
  }
  if (options.link !== undefined && options.link !== 'auto' && options.link !== 'tcp') {
    throw invalid(`link must be 'auto' or 'tcp', got ${String(options.link)}`);
  }
  if (provider === 'ibverbs' && options.link === 'tcp')
    throw invalid("link: 'tcp' is an option of the soft provider");
  if (provider !== 'soft' && options.name !== 'soft0') {
    const status = ibverbsStatus();
    // 'auto' takes only a device that can carry traffic (an ACTIVE port); a named one is
    // opened as asked, and says why if it cannot be used.
    const found = status.devices.find((d) =>
      options.name === undefined
        ? provider === 'ibverbs' || d.ports.some((p) => p.state === IBV_PORT_ACTIVE)
        : d.name === options.name,
    );
    if (found && options.link !== 'tcp') return new Device(ibvInfo(found));
    if (provider === 'ibverbs' && status.devices.length === 0) throw ibverbsUnavailable(status);
  }
  if (options.name !== undefined && options.name !== 'soft0') {
    throw new RdmaError(
      'ERR_RDMA_NO_DEVICE',
      `no device named ${options.name}; available: ${listDevices()
        .map((d) => d.name)
        .join(', ')}`,
    );
  }
  return new Device(softInfo(), options.link === 'tcp');
}

/** An opened RDMA device: creates protection domains and completion queues. */
export class Device extends Resource {
  readonly info: DeviceInfo;
  readonly events = new EventEmitter();
  readonly #native: NativeDevice;
  #softNative: SoftNativeDevice | undefined;
  readonly #ctx: QpContext;
  readonly #cqs = new Map<number, CompletionQueue>();

  #linkServer: LinkServer | undefined;
  #linkAddress: LinkAddress | undefined;
  #listening: Promise<LinkAddress> | undefined;
  readonly #linkClients = new Map<string, LinkClient>();

  /** @internal use openDevice() */
  constructor(info: DeviceInfo, preferTcp = false) {
    super();
    this.info = info;
    const addon = loadAddon();
    // The native side holds this callback strongly: it reaches the device through a
    // WeakRef, and is made outside this constructor, whose closures capture `this`.
    const onEvent = Device.#eventHandler(new WeakRef(this));
    let soft: SoftNativeDevice | undefined;
    if (info.provider === 'ibverbs') {
      if (!addon.IbvDevice) throw ibverbsUnavailable(addon.ibvStatus());
      let ibv: IbvNativeDevice;
      try {
        ibv = new addon.IbvDevice(info.name, onEvent);
      } catch (err) {
        if (err instanceof RdmaError) throw err;
        throw new RdmaError(
          'ERR_RDMA_NO_DEVICE',
          `cannot use ibverbs device ${info.name}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      this.#native = ibv;
      this.#ctx = this.#context(ibv, preferTcp, { route: ibv.routeInfo() });
    } else {
      soft = new addon.SoftDevice(onEvent);
      this.#native = soft;
      this.#softNative = soft;
      this.#ctx = this.#context(soft, preferTcp, {
        soft: { native: soft, endpointBase: soft.endpointBase() },
      });
    }
  }

  #context(
    native: NativeDevice,
    preferTcp: boolean,
    provider: Pick<QpContext, 'soft' | 'route'>,
  ): QpContext {
    return {
      native,
      provider: this.info.provider,
      ...provider,
      maxMsgSize: this.info.limits.maxMsgSize,
      qps: new Map(),
      srqs: new Map(),
      preferTcp,
      linkAddress: () => this.#linkAddress,
      linkClient: (a) => this.#linkClient(a),
      ownsCq: (cq) => this.#cqs.get(cq.handle) === cq,
    };
  }

  /**
   * Soft: accepts peers over the TCP link (peers on other hosts, or `link: 'tcp'`), on
   * `host:port` (default 127.0.0.1, an ephemeral port). Endpoints made afterwards carry
   * the address. Resolves with it.
   */
  listen(options: { host?: string; port?: number } = {}): Promise<LinkAddress> {
    this.assertOpen();
    // Concurrent calls share one listener.
    this.#listening ??= this.#listen(options);
    return this.#listening;
  }

  async #listen(options: { host?: string; port?: number }): Promise<LinkAddress> {
    const soft = this.#softNative;
    if (!soft) throw invalid('listen() is for the soft provider: ibverbs QPs connect directly');
    const host = options.host ?? '127.0.0.1';
    const port = optInt('port', options.port, 0, 65535, 0);
    const { server, address } = await LinkServer.listen(
      soft,
      host,
      port,
      this.info.limits.maxMsgSize,
    );
    if (this.closed) {
      server.close();
      throw new RdmaError('ERR_RDMA_CLOSED', 'device closed while starting to listen');
    }
    this.#linkServer = server;
    this.#linkAddress = address;
    return address;
  }

  #linkClient(a: LinkAddress): LinkClient {
    const key = `${a.host}:${a.port}`;
    let c = this.#linkClients.get(key);
    if (!c || c.dead) {
      c = new LinkClient(a, this.info.limits.maxMsgSize);
      this.#linkClients.set(key, c);
    }
    return c;
  }

  static #eventHandler(ref: WeakRef<Device>): (kind: number, handle: number) => void {
    return (kind, handle) => {
      const device = ref.deref();
      if (device) device.#onEvent(kind, handle);
    };
  }

  /** Port state changes (ibverbs), as typed events. */
  on(event: 'asyncEvent', listener: (e: DeviceAsyncEvent) => void): this {
    this.events.on(event, listener);
    return this;
  }

  get provider(): ProviderName {
    return this.info.provider;
  }

  allocPd(): ProtectionDomain {
    this.assertOpen();
    return new ProtectionDomain(this, this.#ctx, this.info.limits);
  }

  createCq(options: { capacity?: number } = {}): CompletionQueue {
    this.assertOpen();
    const capacity = checkInt('capacity', options.capacity ?? 256, 1, this.info.limits.maxCqe);
    const cq = new CompletionQueue(this, this.#native, this.#native.createCq(capacity), () =>
      this.#cqs.delete(cq.handle),
    );
    this.#cqs.set(cq.handle, cq);
    return cq;
  }

  override close(): void {
    if (this.closed) return;
    // Protection domains (with their queue pairs) go before the CQs those use.
    for (const child of [...this.children()]) if (child instanceof ProtectionDomain) child.close();
    super.close();
  }

  #onEvent(kind: number, handle: number): void {
    if (this.closed) return;
    if (kind === EV_DOORBELL) {
      // ibverbs names the CQ; soft's doorbell is the device's (any of its CQs).
      if (this.info.provider === 'ibverbs') this.#cqs.get(handle)?.onDoorbell();
      else for (const cq of this.#cqs.values()) cq.onDoorbell();
    } else if (kind === EV_CQ_ERR) {
      this.#cqs.get(handle)?.onOverrun();
    } else if (kind === EV_QP_FATAL) {
      this.#ctx.qps.get(handle)?.onFatal();
    } else if (kind === EV_SRQ_LIMIT) {
      this.#ctx.srqs.get(handle)?.onLimit();
    } else if (kind === EV_LINK) {
      this.#ctx.qps.get(handle)?.pumpLink();
    } else if (kind === EV_PORT) {
      const type = PORT_EVENTS[handle >> 8];
      if (type)
        this.events.emit('asyncEvent', { type, port: handle & 0xff } satisfies DeviceAsyncEvent);
    }
  }

  protected kind(): string {
    return 'device';
  }

  protected release(): void {
    this.#linkServer?.close();
    for (const c of this.#linkClients.values()) c.close();
    this.#linkClients.clear();
    this.#native.close();
    this.#cqs.clear();
  }
}
