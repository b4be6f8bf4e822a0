import type { Socket } from 'node:net';
import { MuxDeadlineError, MuxHandshakeError } from './errors.js';
import { checkInt } from './WaitOptions.js';

/** Bounds on the sockets a listener holds before they authenticate. */
export interface PendingHandshakeLimits {
  /** Unauthenticated sockets in total; when full the oldest is dropped for a new one. */
  readonly maxPending: number;
  /** Per remote host (an IPv4 address or an IPv6 /64); when full its oldest is dropped. */
  readonly maxPerHost: number;
  /** Per loopback host (127/8, ::1): local processes, where tests open many at once. */
  readonly maxPerLoopbackHost: number;
  /** The peer's first handshake message must arrive within this (it sends it on connect). */
  readonly firstMessageMs: number;
}

/**
 * Admission of sockets before authentication, shared by the listeners of RdmaTransport and
 * TcpTransport. A new socket is always admitted: when its host, or the whole table, is
 * full, the oldest pending socket (of that host, else of all) is destroyed instead, so
 * silent sockets cannot lock real clients out, and one host can hold only its share.
 * A socket that sent nothing within `firstMessageMs` is destroyed.
 */
export class PendingHandshakes {
  readonly #o: PendingHandshakeLimits;
  /** Insertion order = age: the first entry is the oldest. */
  readonly #all = new Map<Socket, { host: string; timer: NodeJS.Timeout | undefined }>();
  readonly #byHost = new Map<string, Set<Socket>>();

  constructor(limits: PendingHandshakeLimits) {
    this.#o = limits;
  }

  get size(): number {
    return this.#all.size;
  }

  /** How many sockets of `socket`'s host are pending. */
  pendingOf(remoteAddress: string | undefined): number {
    return this.#byHost.get(hostKey(remoteAddress))?.size ?? 0;
  }

  admit(socket: Socket): void {
    const host = hostKey(socket.remoteAddress);
    const loopback = isLoopback(host);
    const mine = this.#byHost.get(host);
    const perHost = loopback ? this.#o.maxPerLoopbackHost : this.#o.maxPerHost;
    if (mine !== undefined && mine.size >= perHost) {
      this.#evict(mine.values().next().value as Socket, `more than ${perHost} from ${host}`);
    } else if (this.#all.size >= this.#o.maxPending) {
      this.#evict(this.#all.keys().next().value as Socket, `more than ${this.#o.maxPending}`);
    }
    const ms = this.#o.firstMessageMs;
    const timer = setTimeout(() => {
      this.settle(socket);
      socket.destroy(new MuxDeadlineError('handshake (server): first message', ms));
    }, ms);
    this.#all.set(socket, { host, timer });
    let set = this.#byHost.get(host);
    if (set === undefined) {
      set = new Set();
      this.#byHost.set(host, set);
    }
    set.add(socket);
    socket.once('data', () => {
      const e = this.#all.get(socket);
      if (e !== undefined) {
        clearTimeout(e.timer);
        e.timer = undefined;
      }
    });
    socket.once('close', () => this.settle(socket));
  }

  /** The socket authenticated, failed or closed: it no longer counts. Idempotent. */
  settle(socket: Socket): void {
    const e = this.#all.get(socket);
    if (e === undefined) return;
    clearTimeout(e.timer);
    this.#all.delete(socket);
    const set = this.#byHost.get(e.host);
    set?.delete(socket);
    if (set?.size === 0) this.#byHost.delete(e.host);
  }

  #evict(socket: Socket, why: string): void {
    this.settle(socket);
    socket.destroy(
      new MuxHandshakeError('ERR_MUX_HANDSHAKE', `handshake (server): dropped, ${why} pending`),
    );
  }
}

/** The accounting key of a remote address: IPv4 as is, IPv6 by its /64. */
export function hostKey(address: string | undefined): string {
  if (address === undefined || address === '') return '?';
  const a = address.toLowerCase();
  if (a.startsWith('::ffff:') && a.includes('.')) return a.slice(7);
  if (!a.includes(':')) return a;
  if (a === '::1') return a;
  const [head = '', tail = ''] = a.split('%')[0]?.split('::') ?? [];
  const h = head === '' ? [] : head.split(':');
  const t = a.includes('::') && tail !== '' ? tail.split(':') : [];
  const groups = [...h, ...new Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

function isLoopback(host: string): boolean {
  return host === '::1' || host.startsWith('127.');
}

/** The transport options these limits come from (one parser for both transports). */
export interface PendingHandshakeOptions {
  maxPendingHandshakesPerHost?: number;
  maxPendingHandshakesPerLoopbackHost?: number;
  firstMessageTimeoutMs?: number;
}

export function pendingHandshakeLimits(
  o: PendingHandshakeOptions,
  maxPending: number,
  handshakeTimeoutMs: number,
): PendingHandshakeLimits {
  return {
    maxPending,
    maxPerHost: checkInt(
      'maxPendingHandshakesPerHost',
      o.maxPendingHandshakesPerHost ?? 8,
      1,
      1 << 20,
    ),
    maxPerLoopbackHost: checkInt(
      'maxPendingHandshakesPerLoopbackHost',
      o.maxPendingHandshakesPerLoopbackHost ?? maxPending,
      1,
      1 << 20,
    ),
    firstMessageMs: Math.min(
      handshakeTimeoutMs,
      checkInt('firstMessageTimeoutMs', o.firstMessageTimeoutMs ?? 2_000, 1, 2_147_483_647),
    ),
  };
}
