// What a provider implements behind the public classes: chosen once when a device opens,
// so Device, QueuePair and friends hold no provider logic.
import type { DeviceInfo, Endpoint, LinkListener, RouteOptions } from '../types.js';
import type { NativeDevice } from './native.js';

/** The faults a test can inject (`@rdmajs/verbs/testing`). */
export type Fault =
  | { type: 'break-qp' }
  | { type: 'break-link' }
  | { type: 'stall-receiver'; on: boolean }
  | { type: 'delay'; ms: number }
  | { type: 'hold-peer-lock'; ms?: number };

/** What a QP driver needs of its queue pair. */
export interface QpHost {
  readonly handle: number;
  readonly closed: boolean;
  /** Throws the transition error when a native transition returned an errno. */
  transitioned(to: 'init' | 'rtr' | 'rts', rc: number): void;
  /** Moves the QP to error (used for the break-qp fault). */
  toError(): void;
}

/** Path options chosen at QP creation (ibverbs); they shape the endpoint. */
export interface QpPath {
  port?: number;
  gidIndex?: number;
}

export interface QpDriver {
  /** The QP's number (the provider's qpInfo record). */
  readonly qpn: number;
  /** The capacities the device granted, right after creation. */
  readonly granted: { maxSendWr?: number; maxRecvWr?: number; maxInlineData?: number };
  endpoint(): Endpoint;
  /** reset → init, granting the peer `access` (Access flags). */
  toInit(access: number): void;
  /**
   * Validates `remote` (untrusted) and the route; returns the init → rtr transition, so a
   * caller can check everything before its first side effect.
   */
  prepareRtr(remote: unknown, minRnrTimer: number, route: RouteOptions): () => void;
  toRts(timeout: number, retryCount: number, rnrRetry: number): void;
  /**
   * True while the QP's completions can arrive only through this process's event loop
   * (soft over the TCP link: the sockets are read there), so spinning cannot see one.
   */
  readonly overLoop?: boolean;
  /** After a successful post: soft's TCP link sends what became ready. */
  afterPost(): void;
  /** The QP went back to reset: forget the peer. */
  onReset(): void;
  /** The device says the link has work for this QP (soft). */
  onLink(): void;
  injectFault(fault: Fault): void;
}

export interface DeviceDriver {
  readonly info: DeviceInfo;
  readonly native: NativeDevice;
  /** The post record (POST_RECORD_WORDS) the native device writes on every post. */
  readonly postRecord: Uint32Array;
  /** A driver for the QP whose native handle is `handle` (just created). */
  qp(host: QpHost, path: QpPath): QpDriver;
  /** Validates provider-specific createQp options; returns the path to create with. */
  checkPath(path: QpPath): QpPath;
  /** Handles of the CQs a doorbell event names: one CQ (ibverbs) or every CQ (soft). */
  readonly doorbellWakesAll: boolean;
  /** Soft: accept peers over the TCP link. */
  listen(host: string, port: number): Promise<LinkListener>;
  close(): void;
}
