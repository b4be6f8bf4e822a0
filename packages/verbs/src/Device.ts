import { EventEmitter } from 'node:events';
import { CompletionQueue } from './CompletionQueue.js';
import { RdmaError } from './errors.js';
import { ABI } from './internal/abi.js';
import type { DeviceDriver } from './internal/driver.js';
import {
  IBV_PORT_ACTIVE,
  IbvDeviceDriver,
  ibverbsUnavailable,
  ibvInfo,
} from './internal/ibv/IbvDeviceDriver.js';
import { Resource } from './internal/lifecycle.js';
import { type IbvStatus, loadAddon } from './internal/native.js';
import { SoftDeviceDriver, softInfo } from './internal/soft/SoftDeviceDriver.js';
import { checkCreate, kCreate, kNotify } from './internal/symbols.js';
import { describe, invalid, optInt, readOptions } from './internal/validate.js';
import { ProtectionDomain } from './ProtectionDomain.js';
import type { QueuePair } from './QueuePair.js';
import type { SharedReceiveQueue } from './SharedReceiveQueue.js';
import type { DeviceInfo, LinkListener, ProviderName } from './types.js';

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

export interface ListenOptions {
  /** Interface to listen on. Default 127.0.0.1. */
  host?: string;
  /** Default 0: an ephemeral port. */
  port?: number;
  /**
   * The host peers dial, carried in endpoints. Default: `host`, or for a wildcard host
   * (0.0.0.0, ::) the first external address of this machine.
   */
  advertise?: string;
  /** The largest payload one link frame carries, in bytes. Default 64 MiB. */
  maxFrameBytes?: number;
}

export type { IbvStatus };

// ibv_event_type values of device and port events.
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

/** What the ibverbs provider offers here (devices, or why there are none). */
export function ibverbsStatus(): IbvStatus {
  return loadAddon().ibvStatus();
}

/** Every device this host offers, with provider, ports and limits (like ibv_devinfo). */
export function listDevices(): DeviceInfo[] {
  return [...ibverbsStatus().devices.map(ibvInfo), softInfo()];
}

/**
 * Opens a device. 'auto' (the default) takes an ibverbs device with an ACTIVE port when
 * one exists (the first, or the one named), else soft. The soft provider is always
 * available.
 */
export function openDevice(options?: OpenDeviceOptions): Device {
  const o = readOptions('openDevice options', options, ['provider', 'name', 'link']);
  const provider = o.provider === undefined ? 'auto' : o.provider;
  if (provider !== 'auto' && provider !== 'soft' && provider !== 'ibverbs')
    throw invalid(`provider must be 'auto', 'soft' or 'ibverbs', got ${describe(provider)}`);
  if (o.link !== undefined && o.link !== 'auto' && o.link !== 'tcp')
    throw invalid(`link must be 'auto' or 'tcp', got ${describe(o.link)}`);
  if (o.name !== undefined && typeof o.name !== 'string')
    throw invalid(`name must be a string, got ${describe(o.name)}`);
  const name = o.name as string | undefined;
  const preferTcp = o.link === 'tcp';
  if (provider === 'ibverbs' && preferTcp)
    throw invalid("link: 'tcp' is an option of the soft provider");
  if (provider !== 'soft' && name !== 'soft0' && !preferTcp) {
    const status = ibverbsStatus();
    // 'auto' takes only a device that can carry traffic (an ACTIVE port); a named one is
    // opened as asked, and says why if it cannot be used.
    const found = status.devices.find((d) =>
      name === undefined
        ? provider === 'ibverbs' || d.ports.some((p) => p.state === IBV_PORT_ACTIVE)
        : d.name === name,
    );
    if (found) return new Device(kCreate, ibvDriver(ibvInfo(found), status));
    if (provider === 'ibverbs' && status.devices.length === 0) throw ibverbsUnavailable(status);
  }
  if (name !== undefined && name !== 'soft0') {
    throw new RdmaError(
      'ERR_RDMA_NO_DEVICE',
      `no device named ${name}; available: ${listDevices()
        .map((d) => d.name)
        .join(', ')}`,
    );
  }
  return new Device(kCreate, softDriver(softInfo(), preferTcp));
}

type OnEvent = (kind: number, handle: number) => void;
type OpenDriver = (onEvent: OnEvent, ready: Uint32Array) => DeviceDriver;

/**
 * A handler's error after the rest of its batch was notified: thrown on its own tick, it
 * reaches uncaughtException as an event callback's error would.
 */
function rethrowLater(err: unknown): void {
  process.nextTick(() => {
    throw err;
  });
}

function softDriver(info: DeviceInfo, preferTcp: boolean): OpenDriver {
  return (onEvent, ready) => {
    const post = new Uint32Array(ABI.POST_RECORD_WORDS);
    const native = new (loadAddon().SoftDevice)(onEvent, ready, post);
    return new SoftDeviceDriver(info, native, post, preferTcp, onEvent);
  };
}

function ibvDriver(info: DeviceInfo, status: IbvStatus): OpenDriver {
  const addon = loadAddon();
  const IbvDevice = addon.IbvDevice;
  if (!IbvDevice) throw ibverbsUnavailable(status);
  return (onEvent) => {
    try {
      const post = new Uint32Array(ABI.POST_RECORD_WORDS);
      return new IbvDeviceDriver(info, new IbvDevice(info.name, onEvent, post), post);
    } catch (err) {
      if (err instanceof RdmaError) throw err;
      throw new RdmaError(
        'ERR_RDMA_NO_DEVICE',
        `cannot use ibverbs device ${info.name}: ${(err as Error).message}`,
        { cause: err },
      );
    }
  };
}

/** What a device's children share: its driver and the live objects async events name. */
export interface DeviceContext {
  readonly driver: DeviceDriver;
  readonly cqs: Map<number, CompletionQueue>;
  readonly qps: Map<number, QueuePair>;
  readonly srqs: Map<number, SharedReceiveQueue>;
}

interface Hold {
  device: Device | undefined;
  waits: number;
}

/** An opened RDMA device: creates protection domains and completion queues. */
export class Device extends Resource {
  readonly info: DeviceInfo;
  readonly #ctx: DeviceContext;
  readonly #emitter = new EventEmitter();
  /** Soft: the CQs a wake-up found ready (EV_CQS_READY names how many), filled natively. */
  readonly #ready = new Uint32Array(ABI.CQ_READY_BATCH);
  #listening: Promise<LinkListener> | undefined;

  /** Devices come from `openDevice()`. */
  constructor(key: typeof kCreate, open: OpenDriver) {
    checkCreate(key, 'openDevice()');
    super();
    const driver = open(Device.#eventSink(new WeakRef(this), this.#hold), this.#ready);
    this.info = driver.info;
    this.#ctx = { driver, cqs: new Map(), qps: new Map(), srqs: new Map() };
  }

  // The native side holds this callback strongly: it reaches the device through a
  // WeakRef, so the device stays collectable (a closure over `this` would pin it). While a
  // CQ of it awaits a wake-up the device is held strongly instead (`hold`): a deref keeps a
  // set of its own per callback (≈120 B each wake-up), and a device someone waits on is
  // in use anyway.
  static #eventSink(ref: WeakRef<Device>, hold: Hold): OnEvent {
    return (kind, handle) => (hold.device ?? ref.deref())?.[kNotify](kind, handle);
  }

  /** Held strongly while `waits` > 0: CQs of it with a wake-up requested. */
  readonly #hold: Hold = { device: undefined, waits: 0 };

  readonly #keep = (delta: number): void => {
    const h = this.#hold;
    h.waits += delta;
    h.device = h.waits > 0 && !this.closed ? this : undefined;
  };

  get provider(): ProviderName {
    return this.info.provider;
  }

  /**
   * Soft: accepts peers over the TCP link (peers on other hosts, or `link: 'tcp'`).
   * Endpoints made afterwards carry the advertised address and their QP's link key.
   * Resolves with the address.
   */
  listen(options?: ListenOptions): Promise<LinkListener> {
    this.assertOpen();
    const o = readOptions('listen options', options, [
      'host',
      'port',
      'advertise',
      'maxFrameBytes',
    ]);
    if (this.info.provider !== 'soft')
      throw invalid('listen() is for the soft provider: ibverbs QPs connect directly');
    const host = o.host === undefined ? '127.0.0.1' : o.host;
    if (typeof host !== 'string') throw invalid(`host must be a string, got ${describe(host)}`);
    if (o.advertise !== undefined && (typeof o.advertise !== 'string' || o.advertise === ''))
      throw invalid(`advertise must be a host name or address, got ${describe(o.advertise)}`);
    const port = optInt('port', o.port, 0, 65535, 0);
    const maxFrame = optInt('maxFrameBytes', o.maxFrameBytes, 1, 2 ** 31, 64 << 20);
    // Concurrent calls share one listener.
    this.#listening ??= (this.#ctx.driver as SoftDeviceDriver).listen(
      host,
      port,
      o.advertise as string | undefined,
      maxFrame,
    );
    return this.#listening;
  }

  /** Port and device events (ibverbs), as typed events. */
  on(event: 'asyncEvent', listener: (e: DeviceAsyncEvent) => void): this {
    this.#emitter.on(checkEvent(event), listener);
    return this;
  }

  off(event: 'asyncEvent', listener: (e: DeviceAsyncEvent) => void): this {
    this.#emitter.off(checkEvent(event), listener);
    return this;
  }

  allocPd(): ProtectionDomain {
    this.assertOpen();
    return new ProtectionDomain(kCreate, this, this.#ctx);
  }

  createCq(options?: { capacity?: number }): CompletionQueue {
    this.assertOpen();
    const o = readOptions('createCq options', options, ['capacity']);
    const capacity = optInt('capacity', o.capacity, 1, this.info.limits.maxCqe, 256);
    const native = this.#ctx.driver.native;
    const cq = new CompletionQueue(
      kCreate,
      this,
      native,
      native.createCq(capacity),
      this.#ctx.cqs,
      this.#keep,
    );
    return cq;
  }

  /** @internal an event from the addon */
  [kNotify](kind: number, handle: number): void {
    if (this.closed) return;
    const ctx = this.#ctx;
    switch (kind) {
      case ABI.EV_DOORBELL:
        // ibverbs names the CQ; soft's doorbell is the device's (any of its CQs).
        if (ctx.driver.doorbellWakesAll) {
          // Each guarded: a handler that throws must not leave the others armed, unwoken.
          let first: { err: unknown } | undefined;
          for (const cq of ctx.cqs.values()) {
            try {
              cq[kNotify]('doorbell');
            } catch (err) {
              first ??= { err };
            }
          }
          if (first !== undefined) rethrowLater(first.err);
        } else ctx.cqs.get(handle)?.[kNotify]('doorbell');
        break;
      case ABI.EV_CQS_READY: {
        // One read often readies several CQs (a QP's send and recv CQs): as above, every
        // one is notified even if a handler throws.
        const ready = this.#ready;
        const n = Math.min(handle, ready.length);
        let first: { err: unknown } | undefined;
        for (let i = 0; i < n; i++) {
          try {
            ctx.cqs.get(ready[i] as number)?.[kNotify]('ready');
          } catch (err) {
            first ??= { err };
          }
        }
        if (first !== undefined) rethrowLater(first.err);
        break;
      }
      case ABI.EV_CQ_ERR:
        ctx.cqs.get(handle)?.[kNotify]('overrun');
        break;
      case ABI.EV_QP_FATAL:
        ctx.qps.get(handle)?.[kNotify]('fatal');
        break;
      case ABI.EV_QP_LAST_WQE:
        ctx.qps.get(handle)?.[kNotify]('lastWqe');
        break;
      case ABI.EV_SRQ_LIMIT:
        ctx.srqs.get(handle)?.[kNotify]('limit');
        break;
      case ABI.EV_LINK:
        ctx.qps.get(handle)?.[kNotify]('link');
        break;
      case ABI.EV_PORT: {
        const type = PORT_EVENTS[handle >> 8];
        if (type)
          this.#emitter.emit('asyncEvent', {
            type,
            port: handle & 0xff,
          } satisfies DeviceAsyncEvent);
        break;
      }
    }
  }

  protected kind(): 'device' {
    return 'device';
  }

  protected release(): void {
    this.#hold.device = undefined;
    this.#ctx.driver.close();
    this.#ctx.cqs.clear();
  }
}

function checkEvent(event: unknown): 'asyncEvent' {
  if (event !== 'asyncEvent') throw invalid(`unknown event ${describe(event)}: 'asyncEvent'`);
  return event;
}
