// A soft QP: shared memory to peers on this host, the TCP link to the others.
import type { RouteOptions, SoftEndpoint } from '../../types.js';
import { ABI } from '../abi.js';
import { QP_STATE_CODE } from '../codes.js';
import type { Fault, QpDriver, QpHost } from '../driver.js';
import type { SoftEndpointBase, SoftNativeDevice } from '../native.js';
import { invalid } from '../validate.js';
import { checkSoftEndpoint, notListening } from './endpoint.js';
import type { LinkClient } from './link/LinkClient.js';
import type { SoftDeviceDriver } from './SoftDeviceDriver.js';

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
  #linkHdr: Float64Array | undefined;
  #linkPayload = new Uint8Array(0);

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
    const tcp = this.#device.linkAddress;
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
      ...(tcp ? { tcp: { ...tcp } } : {}),
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
      return () => {
        const link = this.#device.linkClient(tcp); // before the transition: it may throw
        const rc = this.#native.toRtrLink(h, ep.pid, ep.slot, ep.gen, ep.qpn, minRnr);
        this.#host.transitioned('rtr', rc);
        this.#link = link;
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

  /** Sends what the native side has ready for the TCP link (one WR in flight). */
  onLink(): void {
    const link = this.#link;
    const hdr = this.#linkHdr;
    if (!link || !hdr || this.#host.closed || this.#device.closed) return;
    for (;;) {
      const r = this.#native.linkTake(this.#host.handle, hdr, this.#linkPayload);
      if (r < 0) {
        this.#linkPayload = new Uint8Array(-r); // grows once to the largest message
        continue;
      }
      if (r === 0) return;
      const payload =
        hdr[ABI.LINK_OPCODE] === ABI.OP_RDMA_READ
          ? undefined
          : this.#linkPayload.subarray(0, hdr[ABI.LINK_LENGTH] as number);
      const token = hdr[ABI.LINK_TOKEN] as number;
      link.send(hdr, payload, (outcome, status, rnrTimer, data) => {
        if (this.#host.closed || this.#device.closed) return;
        this.#native.linkDone(this.#host.handle, token, outcome, status, rnrTimer, data);
        this.onLink();
      });
      return;
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
