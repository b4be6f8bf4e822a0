// The soft device: the embedded userspace provider (shared memory on one host, a TCP
// link across hosts).
import { networkInterfaces } from 'node:os';
import { RdmaError } from '../../errors.js';
import type { DeviceInfo, LinkAddress, LinkListener } from '../../types.js';
import { ABI } from '../abi.js';
import type { DeviceDriver, QpHost, QpPath } from '../driver.js';
import { loadAddon, type SoftEndpointBase, type SoftNativeDevice } from '../native.js';
import { exactU64 } from '../u64.js';
import { invalid } from '../validate.js';
import { LINK_VERSION, type LinkTarget, newSecret, qpLinkKey } from './link/handshake.js';
import { LinkClient } from './link/LinkClient.js';
import { type AcceptedLink, type LinkEnd, LinkServer } from './link/LinkServer.js';
import { type SendNow, sendVia } from './link/Outbox.js';
import { SoftQpDriver } from './SoftQpDriver.js';

export function softInfo(): DeviceInfo {
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
      maxMrSize: exactU64(l.maxMrSize),
      maxMsgSize: l.maxMsgSize,
      maxInlineData: l.maxInlineData,
      maxSrq: 1024,
      maxSrqWr: l.maxSrqWr,
    },
  };
}

function rethrow(err: unknown): never {
  throw err;
}

const WILDCARDS = new Set(['0.0.0.0', '::', '']);

/**
 * Open soft devices of this thread. A post's doorbells ring once the JS that posted is over
 * (the native device holds them, one per peer for a whole batch); a process that exits
 * first (process.exit() in a handler, an uncaught exception) rings them on 'exit', so a
 * message it posted never sits in a peer's CQ without its wake-up.
 */
const openDevices = new Set<WeakRef<SoftNativeDevice>>(); // weak: a dropped device stays collectable
const forget = new FinalizationRegistry<WeakRef<SoftNativeDevice>>((r) => openDevices.delete(r));
let exitHooked = false;
function flushOnExit(): void {
  for (const d of openDevices) d.deref()?.flushDoorbells();
}

/** The address peers should dial when listening on every interface. */
function advertisedHost(host: string, advertise: string | undefined): string {
  if (advertise !== undefined) return advertise;
  if (!WILDCARDS.has(host)) return host;
  const v6 = host === '::';
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (!a.internal && (a.family === 'IPv4' || v6)) return a.address;
    }
  }
  throw invalid(
    `listening on ${host || 'every interface'}, but this host has no external address to advertise: pass { advertise: 'host-or-ip' }`,
  );
}

export class SoftDeviceDriver implements DeviceDriver {
  readonly info: DeviceInfo;
  readonly native: SoftNativeDevice;
  readonly postRecord: Uint32Array;
  readonly doorbellWakesAll = true;
  /** Use the TCP link even for peers on this host (`link: 'tcp'`, for tests). */
  readonly preferTcp: boolean;
  readonly #base: SoftEndpointBase;
  #server: LinkServer | undefined;
  /** what the listener accepts per frame (told to the QPs a local QP dials: protocol 4) */
  #maxFrame = 0;
  /** where the link listens (without a key: each QP's endpoint carries its own) */
  #listening: LinkListener | undefined;
  readonly #clients = new Map<string, LinkClient>();
  /** how the connections its QPs dial write when nothing is queued in their socket */
  readonly #linkSend: SendNow;
  /** the device's event handler (Device): the CQs a read made ready are notified through it */
  readonly #onEvent: (kind: number, handle: number) => void;
  /**
   * Delivers the wake-ups a read's frames owe this device's CQs, at the end of that read: the
   * addon names the ready CQs (in the handler's array) and they are notified from here, no
   * callback into JS from the addon. A handler that throws reaches uncaughtException, as from
   * any event callback, never the link's reader. `taken` ≥ 0: respondFrame took them already
   * (that many ready CQs in the array: FRAME_READY), no wakeOwed crossing.
   */
  readonly #wake = (taken?: number): void => {
    const n = taken !== undefined && taken >= 0 ? taken : this.native.wakeOwed();
    if (n === 0) return;
    try {
      this.#onEvent(ABI.EV_CQS_READY, n);
    } catch (err) {
      process.nextTick(rethrow, err);
    }
  };
  /** QPs connected over the link, by slot (their generation checked on lookup) */
  readonly #linkQps = new Map<number, { gen: number; end: LinkEnd }>();
  /** The link's secret: never leaves this process; each QP's link key derives from it. */
  readonly #secret = newSecret();
  #closed = false;
  /** Its entry in openDevices. */
  readonly #registered: WeakRef<SoftNativeDevice>;

  constructor(
    info: DeviceInfo,
    native: SoftNativeDevice,
    postRecord: Uint32Array,
    preferTcp: boolean,
    onEvent: (kind: number, handle: number) => void,
  ) {
    this.#onEvent = onEvent;
    this.info = info;
    this.native = native;
    this.postRecord = postRecord;
    this.preferTcp = preferTcp;
    this.#base = native.endpointBase();
    this.#linkSend = sendVia(native);
    this.#registered = new WeakRef(native);
    openDevices.add(this.#registered);
    forget.register(native, this.#registered, this.#registered);
    if (!exitHooked) {
      exitHooked = true;
      process.on('exit', flushOnExit);
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Whether `listen()` resolved: QPs' endpoints then carry a link address. */
  get listening(): boolean {
    return this.#listening !== undefined;
  }

  /** Where peers reach the QP `target` of this device over the link, with its key. */
  linkAddressFor(target: LinkTarget): LinkAddress | undefined {
    const l = this.#listening;
    if (!l) return undefined;
    return {
      ...l,
      key: qpLinkKey(this.#secret, target).toString('base64url'),
      version: LINK_VERSION,
    };
  }

  checkPath(path: QpPath): QpPath {
    if (path.port !== undefined && path.port !== 1)
      throw invalid('the soft device has one port: 1');
    if (path.gidIndex !== undefined) throw invalid('gidIndex is an option of the ibverbs provider');
    return {};
  }

  /** `end` (the QP of `slot`, `gen`) is connected over the link: requests to it are answered via it. */
  linkConnected(slot: number, gen: number, end: LinkEnd): void {
    this.#linkQps.set(slot, { gen, end });
    // Its peer may have dialed already (protocol 4: that connection is the pair's one).
    this.#server?.offer(slot, gen, end);
  }

  /** The QP of `slot` left the link (reset). */
  linkLeft(slot: number, end: LinkEnd): void {
    if (this.#linkQps.get(slot)?.end === end) this.#linkQps.delete(slot);
  }

  readonly #linkEnd = (slot: number, gen: number): LinkEnd | undefined => {
    const e = this.#linkQps.get(slot);
    return e && e.gen === gen ? e.end : undefined;
  };

  qp(host: QpHost): SoftQpDriver {
    return new SoftQpDriver(host, this, this.native, this.#base);
  }

  /** Frames the link accepts carry at most this much payload (a WR over it: REM_INV_REQ_ERR). */
  static readonly DEFAULT_MAX_FRAME = 64 << 20;

  async listen(
    host: string,
    port: number,
    advertise?: string,
    maxFrameBytes = SoftDeviceDriver.DEFAULT_MAX_FRAME,
  ): Promise<LinkListener> {
    const advertised = advertisedHost(host, advertise); // before listening: it may throw
    const maxFrame = Math.min(maxFrameBytes, this.info.limits.maxMsgSize);
    const { server, port: bound } = await LinkServer.listen(
      this.native,
      host,
      port,
      this.#secret,
      maxFrame,
      this.#linkEnd,
      this.#wake,
    );
    if (this.#closed) {
      server.close();
      throw new RdmaError('ERR_RDMA_CLOSED', 'device closed while starting to listen');
    }
    this.#server = server;
    this.#maxFrame = maxFrame;
    this.#listening = { host: advertised, port: bound };
    return { ...this.#listening };
  }

  /**
   * The connection local QP `local` dials to the remote QP `target` at `a` (one per pair of
   * QP incarnations). When this device listens, it carries the remote QP's requests to
   * `local` too (protocol 4), read by this device's LinkServer.
   */
  linkClient(a: LinkAddress, target: LinkTarget, local: LinkTarget): LinkClient {
    const id = `${local.slot}:${local.gen}>${a.host}:${a.port}:${target.slot}:${target.gen}:${a.key}`;
    let c = this.#clients.get(id);
    if (!c || c.dead) {
      const server = this.#server;
      c = new LinkClient(a, target, c, {
        ownKey: server ? qpLinkKey(this.#secret, local) : undefined,
        ownMaxPayload: this.#maxFrame,
        serve: server ? (sock) => server.serveDialed(sock, local) : undefined,
        flushed: server?.settle,
        lastOwed: server?.lastOwed,
        readBuffer: server?.readBuffer,
        send: this.#linkSend,
        wake: this.#wake,
      });
      this.#clients.set(id, c);
    }
    return c;
  }

  /** A connection the remote QP dialed, adopted by a local QP for its own requests. */
  adoptedClient(link: AcceptedLink, previous: LinkClient | undefined): LinkClient {
    const server = this.#server;
    return new LinkClient(link, undefined, previous, {
      flushed: server?.settle,
      lastOwed: server?.lastOwed,
    });
  }

  close(): void {
    this.#closed = true;
    this.#server?.close();
    for (const c of this.#clients.values()) c.close();
    this.#clients.clear();
    openDevices.delete(this.#registered);
    forget.unregister(this.#registered);
    this.native.close();
  }
}
