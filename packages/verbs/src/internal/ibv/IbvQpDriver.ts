// An ibverbs QP: RTR/RTS with explicit attributes; the endpoint names port, LID and GID.
import type { IbvEndpoint, RouteOptions } from '../../types.js';
import { QP_STATE_CODE } from '../codes.js';
import type { Fault, QpDriver, QpHost, QpPath } from '../driver.js';
import type { IbvNativeDevice, IbvRoute } from '../native.js';
import { invalid, optInt } from '../validate.js';
import { checkIbvEndpoint, endpointOf } from './endpoint.js';

export class IbvQpDriver implements QpDriver {
  readonly qpn: number;
  readonly granted: { maxSendWr: number; maxRecvWr: number; maxInlineData: number };
  readonly #host: QpHost;
  readonly #native: IbvNativeDevice;
  readonly #route: IbvRoute;
  /** the initial packet sequence number of this QP's send queue */
  readonly #psn: number;
  /** READs the peer's responder accepts in flight (from its endpoint) */
  #peerRdAtomic = 1;

  constructor(host: QpHost, native: IbvNativeDevice, path: QpPath) {
    this.#host = host;
    this.#native = native;
    this.#route = native.routeInfo(path.port, path.gidIndex);
    const { qpn, psn, maxSendWr, maxRecvWr, maxInlineData } = native.qpInfo(host.handle);
    this.qpn = qpn;
    this.#psn = psn;
    // ibverbs reports what the device granted: the real ring sizes are the capacity.
    this.granted = { maxSendWr, maxRecvWr, maxInlineData };
  }

  endpoint(): IbvEndpoint {
    return endpointOf(this.#route, this.qpn, this.#psn);
  }

  toInit(access: number): void {
    const rc = this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.init, {
      access,
      port: this.#route.port,
    });
    this.#host.transitioned('init', rc);
  }

  prepareRtr(remote: unknown, minRnr: number, route: RouteOptions): () => void {
    const ep = checkIbvEndpoint(remote);
    const hopLimit = optInt('hopLimit', route.hopLimit, 1, 255, 64);
    const sl = optInt('sl', route.sl, 0, 15, 0);
    const trafficClass = optInt('trafficClass', route.trafficClass, 0, 255, 0);
    const r = this.#route;
    return () => {
      const rc = this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.rtr, {
        destQpn: ep.qpn,
        rqPsn: ep.psn,
        dlid: ep.lid,
        gidWords: ep.gidWords,
        mtu: ep.mtu,
        minRnrTimer: minRnr,
        port: r.port,
        sgidIndex: r.gidIndex,
        hopLimit,
        sl,
        trafficClass,
      });
      this.#host.transitioned('rtr', rc);
      this.#peerRdAtomic = ep.maxRdAtomic;
    };
  }

  toRts(timeout: number, retryCount: number, rnrRetry: number): void {
    const rc = this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.rts, {
      timeout,
      retryCount,
      rnrRetry,
      maxRdAtomic: this.#peerRdAtomic,
    });
    this.#host.transitioned('rts', rc);
  }

  afterPost(): void {}
  onReset(): void {}
  onLink(): void {}

  injectFault(fault: Fault): void {
    if (fault.type !== 'break-qp') throw invalid(`fault ${fault.type} needs the soft provider`);
    this.#host.toError();
  }
}
