// A soft QP: shared memory to peers on this host, the TCP link to the others.
import type { LinkAddress, RouteOptions, SoftEndpoint } from '../../types.js';
import { ABI } from '../abi.js';
import { QP_STATE_CODE } from '../codes.js';
import type { Fault, QpDriver, QpHost } from '../driver.js';
import type { SoftEndpointBase, SoftNativeDevice } from '../native.js';
import { invalid } from '../validate.js';
import { checkSoftEndpoint, notListening } from './endpoint.js';
import type { LinkTarget } from './link/handshake.js';
import type { LinkClient, LinkOwner } from './link/LinkClient.js';
import type { SoftDeviceDriver } from './SoftDeviceDriver.js';

const EMPTY = new Uint8Array(0);
/** Payload bytes a QP keeps for frames on the link (beyond one WR of any size). */
const LINK_POOL_BYTES = 8 << 20;

export class SoftQpDriver implements QpDriver {
  readonly qpn: number;
  readonly granted = {};
  readonly #host: QpHost;
  readonly #device: SoftDeviceDriver;
  readonly #native: SoftNativeDevice;
  readonly #base: SoftEndpointBase;
  /** slot and generation of the QP's shared descriptor */
  readonly #slot: number;
  readonly #gen: number;
  #link: LinkClient | undefined;
  /** the remote QP's link address and identity, to reconnect after a failed connection */
  #linkAddress: LinkAddress | undefined;
  #linkTarget: LinkTarget | undefined;
  #linkHdr: Float64Array | undefined;
  /** payload buffers no socket reads now; with those in use, at most LINK_POOL_BYTES */
  readonly #linkFree: Uint8Array[] = [];
  #linkPoolBytes = 0;
  #linkInUse = 0;
  readonly #linkOwner: LinkOwner = {
    answer: (token, outcome, status, rnrTimer, data) => {
      if (this.#host.closed || this.#device.closed) return;
      this.#native.linkDone(this.#host.handle, token, outcome, status, rnrTimer, data);
      this.onLink();
    },
    progress: () => {
      if (!this.#host.closed && !this.#device.closed) this.#native.linkProgress(this.#host.handle);
    },
    released: (view) => {
      this.#linkInUse--;
      // Each pool buffer owns its ArrayBuffer; the socket had a view of its first bytes.
      if (view.buffer.byteLength > 0) this.#linkFree.push(new Uint8Array(view.buffer));
    },
  };

  constructor(
    host: QpHost,
    device: SoftDeviceDriver,
    native: SoftNativeDevice,
    base: SoftEndpointBase,
  ) {
    this.#host = host;
    this.#device = device;
    this.#native = native;
    this.#base = base;
    const { qpn, slot, gen } = native.qpInfo(host.handle);
    this.qpn = qpn;
    this.#slot = slot;
    this.#gen = gen;
  }

  endpoint(): SoftEndpoint {
    const b = this.#base;
    const tcp = this.#device.linkAddressFor({ slot: this.#slot, gen: this.#gen });
    return {
      provider: 'soft',
      transport: 'shm',
      qpn: this.qpn,
      psn: 0,
      bootId: b.bootId,
      pid: b.pid,
      segFd: b.segFd,
      bellFd: b.bellFd,
      nonce: b.nonce,
      slot: this.#slot,
      gen: this.#gen,
      ...(tcp ? { tcp } : {}),
    };
  }

  toInit(access: number): void {
    this.#host.transitioned(
      'init',
      this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.init, { access }),
    );
  }

  prepareRtr(remote: unknown, minRnr: number, route: RouteOptions): () => void {
    if (route.hopLimit !== undefined || route.sl !== undefined || route.trafficClass !== undefined)
      throw invalid('hopLimit, sl and trafficClass are options of the ibverbs provider');
    const ep = checkSoftEndpoint(remote);
    const h = this.#host.handle;
    if (this.#device.preferTcp || ep.bootId !== this.#base.bootId) {
      const tcp = ep.tcp;
      if (!tcp) throw notListening();
      const target = { slot: ep.slot, gen: ep.gen };
      return () => {
        const link = this.#device.linkClient(tcp, target); // before the transition: it may throw
        const rc = this.#native.toRtrLink(h, {
          pid: ep.pid,
          slot: ep.slot,
          gen: ep.gen,
          qpn: ep.qpn,
          minRnrTimer: minRnr,
        });
        this.#host.transitioned('rtr', rc);
        this.#link = link;
        this.#linkAddress = tcp;
        this.#linkTarget = target;
        this.#linkHdr ??= new Float64Array(ABI.LINK_WORDS);
      };
    }
    return () => {
      const rc = this.#native.modifyQp(h, QP_STATE_CODE.rtr, {
        pid: ep.pid,
        segFd: ep.segFd,
        bellFd: ep.bellFd,
        slot: ep.slot,
        gen: ep.gen,
        qpn: ep.qpn,
        nonce: ep.nonce,
        minRnrTimer: minRnr,
      });
      this.#host.transitioned('rtr', rc);
      this.#link = undefined;
    };
  }

  toRts(timeout: number, retryCount: number, rnrRetry: number): void {
    const rc = this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.rts, {
      timeout,
      retryCount,
      rnrRetry,
    });
    this.#host.transitioned('rts', rc);
  }

  afterPost(): void {
    if (this.#link) this.onLink();
  }

  onReset(): void {
    this.#link = undefined;
  }

  /**
   * Sends what the native side has ready for the TCP link: the head WR and those behind it
   * (the native side bounds how many). Each payload is gathered into a buffer of its own
   * that the socket reads until written; their bytes are bounded by LINK_POOL_BYTES (one
   * WR always goes, whatever its size).
   */
  onLink(): void {
    const hdr = this.#linkHdr;
    let link = this.#link;
    if (!link || !hdr || this.#host.closed || this.#device.closed) return;
    if (link.dead && this.#linkAddress && this.#linkTarget) {
      // Resent after a failed connection go over a new one (the target answers WRs it
      // already ran from memory).
      link = this.#device.linkClient(this.#linkAddress, this.#linkTarget);
      this.#link = link;
    }
    for (;;) {
      const buf = this.#linkFree.pop() ?? EMPTY;
      const taken = this.#native.linkTake(this.#host.handle, hdr, buf);
      if (taken === ABI.LINK_TAKE_NEEDS_BUFFER) {
        const need = hdr[ABI.LINK_LENGTH] as number;
        this.#linkPoolBytes -= buf.length;
        if (this.#linkInUse > 0 && this.#linkPoolBytes + need > LINK_POOL_BYTES) {
          this.#linkPoolBytes += buf.length;
          if (buf.length) this.#linkFree.push(buf);
          return; // taken when a frame in flight leaves the socket
        }
        this.#linkPoolBytes += need;
        this.#linkFree.push(new Uint8Array(need));
        continue;
      }
      if (taken === ABI.LINK_TAKE_NONE || hdr[ABI.LINK_OPCODE] === ABI.OP_RDMA_READ) {
        if (buf.length) this.#linkFree.push(buf);
        if (taken === ABI.LINK_TAKE_NONE) return;
        link.send(hdr, undefined, this.#linkOwner);
        continue;
      }
      this.#linkInUse++;
      link.send(hdr, buf.subarray(0, hdr[ABI.LINK_LENGTH] as number), this.#linkOwner);
    }
  }

  injectFault(fault: Fault): void {
    const h = this.#host.handle;
    if (fault.type === 'break-qp') this.#host.toError();
    else if (fault.type === 'break-link') this.#native.inject(h, ABI.FAULT_BREAK_LINK, 0);
    else if (fault.type === 'stall-receiver')
      this.#native.inject(h, ABI.FAULT_STALL_RECEIVER, fault.on ? 1 : 0);
    else this.#native.inject(h, ABI.FAULT_DELAY, fault.ms);
  }
}
