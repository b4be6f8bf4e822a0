import { EventEmitter } from 'node:events';
import net from 'node:net';
import type { RegisteredAllocator } from '@rdmajs/allocator';
import {
  type ConnectOptions,
  checkInt,
  FRAME_HEADER_BYTES,
  Handshake,
  type HandshakeLimits,
  type Listener,
  type ListenerEvents,
  type ListenOptions,
  MAX_FRAME_LIMIT,
  MIN_WINDOW_BYTES,
  MuxAbortError,
  MuxConnectionError,
  MuxError,
  MuxHandshakeError,
  type PendingHandshakeLimits,
  type PendingHandshakeOptions,
  PendingHandshakes,
  PROTOCOL_VERSION,
  pendingHandshakeLimits,
  signalOf,
  socketHandshake,
  type Transport,
  timeoutOf,
} from '@rdmajs/mux';
import { adoptAccepted } from '@rdmajs/socket-reads';
import { SocketReads } from './internal/SocketReads.js';
import { TcpConnection, type TcpConnectionSettings } from './TcpConnection.js';

const MiB = 1024 * 1024;

export interface TcpTransportOptions extends PendingHandshakeOptions {
  /** Largest message this side accepts, bytes. Default 16 MiB. */
  maxMessageBytes?: number;
  /**
   * Receive window: bytes (payloads + 16-byte frame headers) the peer may have sent that the
   * application has not released. Bounds the memory a connection holds. Default 64 MiB; at
   * least maxMessageBytes + 16.
   */
  windowBytes?: number;
  /** Messages the peer may have sent that the application has not released. Default 65 536. */
  windowMessages?: number;
  /** Channels per connection (both sides' together). Default 65 536. */
  maxChannels?: number;
  /** Deadline of every wait that names none (connect, send, receive, close). Default 30 000. */
  defaultTimeoutMs?: number;
  /** Handshake deadline on the listening side. Default 10 000. */
  handshakeTimeoutMs?: number;
  /**
   * Unauthenticated sockets a listener holds at once; beyond it the oldest is dropped for the
   * new one (a flood of silent connections can neither hold unbounded sockets nor lock real
   * clients out). Per host see `maxPendingHandshakesPerHost` (default 8), the first
   * message's deadline `firstMessageTimeoutMs` (default 2 000). Default 256.
   */
  maxPendingHandshakes?: number;
  /** A ping goes out when nothing was written for half of this. Default 1 000. */
  heartbeatIntervalMs?: number;
  /** The connection fails with ERR_MUX_PEER_TIMEOUT after this long without a frame. Default 5 000. */
  peerTimeoutMs?: number;
  /** Longest delay before released receive space is credited back. Default 5. */
  creditFlushMs?: number;
  /**
   * Received payloads are copied into blocks of this allocator. Default: into a few slabs
   * per connection, recycled once their messages are released (see README, Memory). Empty
   * payloads, and payloads arriving while the allocator is at its limit (ERR_ALLOC_LIMIT),
   * go to the slabs: a shared allocator's limit never fails a connection.
   */
  receiveAllocator?: RegisteredAllocator;
  /**
   * Send window cap, whatever the peer announces (a peer that stops reading cannot make us
   * queue gigabytes). Default this side's own `windowBytes` and `windowMessages`.
   */
  maxSendWindowBytes?: number;
  maxSendWindowMessages?: number;
  /** Sends wait for 'drain' while the socket holds more than this unwritten. Default 4 MiB. */
  maxSocketBacklogBytes?: number;
  /** Protocol version to announce. For tests of version rejection only. */
  protocolVersion?: number;
  /**
   * What protects frames after the handshake. `'aead'` (default): every tick's frames go in
   * records sealed with the connection's session keys (AES-256-GCM; the handshake derives
   * one key per direction from the secret and its transcript), so a host on the path can
   * neither read nor alter, replay, reorder, drop or inject frames (`ERR_MUX_INTEGRITY`).
   * `'none'`: frames in clear, authenticated only at the handshake — for a network you
   * trust as you trust an RDMA fabric, and for baselines (kernel TCP as RDMA's data path
   * is: unencrypted). Both sides must agree: a listener refuses the other kind at the
   * client's first message (`ERR_MUX_TRANSPORT`).
   */
  frameProtection?: 'aead' | 'none';
}

interface Resolved
  extends Omit<Required<TcpTransportOptions>, 'receiveAllocator' | keyof PendingHandshakeOptions> {
  receiveAllocator: RegisteredAllocator | undefined;
  pending: PendingHandshakeLimits;
}

/**
 * The rdmajs messaging contract over kernel TCP (node:net): a fair baseline for RDMA and the
 * fallback when RDMA is not available. No Nagle, writes batched per tick, no copies of
 * message parts in JS, frames parsed without concatenating the stream, bounded memory per
 * connection (a send window the receiver refills as it releases messages), heartbeats.
 */
export class TcpTransport implements Transport {
  readonly name = 'tcp';
  readonly #o: Resolved;

  constructor(options: TcpTransportOptions = {}) {
    const o = options ?? {};
    const maxMessageBytes = checkInt(
      'maxMessageBytes',
      o.maxMessageBytes ?? 16 * MiB,
      0,
      MAX_FRAME_LIMIT,
    );
    const windowBytes = checkInt(
      'windowBytes',
      o.windowBytes ?? Math.max(64 * MiB, maxMessageBytes + FRAME_HEADER_BYTES),
      Math.max(MIN_WINDOW_BYTES, maxMessageBytes + FRAME_HEADER_BYTES),
      0xffffffff,
    );
    const windowMessages = checkInt('windowMessages', o.windowMessages ?? 65_536, 1, 0xffffffff);
    const handshakeTimeoutMs = checkInt(
      'handshakeTimeoutMs',
      o.handshakeTimeoutMs ?? 10_000,
      1,
      2_147_483_647,
    );
    const maxPendingHandshakes = checkInt(
      'maxPendingHandshakes',
      o.maxPendingHandshakes ?? 256,
      1,
      1 << 20,
    );
    this.#o = {
      maxMessageBytes,
      windowBytes,
      windowMessages,
      maxSendWindowBytes: checkInt(
        'maxSendWindowBytes',
        o.maxSendWindowBytes ?? windowBytes,
        1,
        0xffffffff,
      ),
      maxSendWindowMessages: checkInt(
        'maxSendWindowMessages',
        o.maxSendWindowMessages ?? windowMessages,
        1,
        0xffffffff,
      ),
      maxSocketBacklogBytes: checkInt(
        'maxSocketBacklogBytes',
        o.maxSocketBacklogBytes ?? 4 * MiB,
        0,
        0xffffffff,
      ),
      maxChannels: checkInt('maxChannels', o.maxChannels ?? 65_536, 1, 1 << 30),
      defaultTimeoutMs: checkInt(
        'defaultTimeoutMs',
        o.defaultTimeoutMs ?? 30_000,
        1,
        2_147_483_647,
      ),
      handshakeTimeoutMs,
      maxPendingHandshakes,
      pending: pendingHandshakeLimits(o, maxPendingHandshakes, handshakeTimeoutMs),
      heartbeatIntervalMs: checkInt(
        'heartbeatIntervalMs',
        o.heartbeatIntervalMs ?? 1_000,
        10,
        2_147_483_647,
      ),
      peerTimeoutMs: checkInt('peerTimeoutMs', o.peerTimeoutMs ?? 5_000, 20, 2_147_483_647),
      creditFlushMs: checkInt('creditFlushMs', o.creditFlushMs ?? 5, 0, 60_000),
      receiveAllocator: o.receiveAllocator,
      protocolVersion: checkInt(
        'protocolVersion',
        o.protocolVersion ?? PROTOCOL_VERSION,
        0,
        0xffff,
      ),
      frameProtection: frameProtectionOf(o.frameProtection),
    };
    if (this.#o.peerTimeoutMs <= this.#o.heartbeatIntervalMs) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        'peerTimeoutMs must be longer than heartbeatIntervalMs',
      );
    }
  }

  #limits(): HandshakeLimits {
    return {
      maxFrameBytes: Math.max(1, this.#o.maxMessageBytes),
      windowBytes: this.#o.windowBytes,
      windowMessages: this.#o.windowMessages,
    };
  }

  /** The connection's settings once `hs` is done (its keys seal frames, unless 'none'). */
  #settings(hs: Handshake): TcpConnectionSettings {
    const o = this.#o;
    const peer = hs.peerLimits as HandshakeLimits;
    return {
      sealWith: o.frameProtection === 'aead' ? hs.sessionKeys : undefined,
      local: this.#limits(),
      peer,
      maxChannels: o.maxChannels,
      defaultTimeoutMs: o.defaultTimeoutMs,
      heartbeatIntervalMs: o.heartbeatIntervalMs,
      peerTimeoutMs: o.peerTimeoutMs,
      creditFlushMs: o.creditFlushMs,
      receiveAllocator: o.receiveAllocator,
      maxSendWindow: { maxBytes: o.maxSendWindowBytes, maxMessages: o.maxSendWindowMessages },
      maxSocketBacklogBytes: o.maxSocketBacklogBytes,
    };
  }

  #handshake(role: 'client' | 'server', secret: ListenOptions['secret']): Handshake {
    return new Handshake({
      role,
      secret,
      limits: this.#limits(),
      version: this.#o.protocolVersion,
      transport: this.#o.frameProtection === 'aead' ? 'tcp-sealed' : 'tcp',
    });
  }

  async connect(options: ConnectOptions): Promise<TcpConnection> {
    if (options === null || typeof options !== 'object') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'connect options must be an object');
    }
    const port = checkInt('port', options.port, 1, 65_535);
    const host = options.host ?? '127.0.0.1';
    const timeoutMs = timeoutOf(options, this.#o.defaultTimeoutMs);
    const signal = signalOf(options);
    const hs = this.#handshake('client', options.secret); // validates the secret first
    if (signal?.aborted === true) throw new MuxAbortError('connect', signal.reason);
    const started = performance.now();
    const reads = new SocketReads();
    const socket = net.connect({
      host,
      port,
      allowHalfOpen: true,
      noDelay: true,
      onread: reads.onread,
    });
    reads.socket = socket;
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        socket.off('connect', onConnect);
        socket.off('error', onError);
        signal?.removeEventListener('abort', onAbort);
        if (err === undefined) resolve();
        else {
          socket.destroy();
          reject(err);
        }
      };
      const onConnect = () => done();
      const onError = (err: Error) =>
        done(
          new MuxConnectionError(
            'ERR_MUX_CONNECTION_LOST',
            `connect to ${host}:${port}: ${err.message}`,
            err,
          ),
        );
      const onAbort = () => done(new MuxAbortError('connect', signal?.reason));
      const timer = setTimeout(
        () =>
          done(
            new MuxError(
              'ERR_MUX_DEADLINE',
              `connect to ${host}:${port}: not connected within ${timeoutMs} ms`,
              { retryable: true },
            ),
          ),
        timeoutMs,
      );
      socket.once('connect', onConnect);
      socket.once('error', onError);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    const left = Math.max(1, timeoutMs - (performance.now() - started));
    const leftover = await socketHandshake(socket, hs, left, signal);
    return new TcpConnection(socket, 'client', this.#settings(hs), leftover, reads);
  }

  async listen(options: ListenOptions): Promise<TcpListener> {
    if (options === null || typeof options !== 'object') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'listen options must be an object');
    }
    this.#handshake('server', options.secret); // validates the secret now, not per peer
    const host = options.host ?? '127.0.0.1';
    const port = checkInt('port', options.port ?? 0, 0, 65_535);
    // Paused: each accepted socket is adopted to read into the shared buffer (SocketReads).
    const server = net.createServer({ allowHalfOpen: true, noDelay: true, pauseOnConnect: true });
    const listener = new TcpListener(server, host);
    const admission = new PendingHandshakes(this.#o.pending);
    server.on('connection', (raw) => {
      const remote = `${raw.remoteAddress}:${raw.remotePort}`;
      if (listener.closed) {
        raw.destroy();
        const err = new MuxHandshakeError(
          'ERR_MUX_HANDSHAKE',
          'handshake (server): the listener is closed',
        );
        if (listener.listenerCount('reject') > 0) listener.emit('reject', err, remote);
        return;
      }
      const reads = new SocketReads();
      const socket = adoptAccepted(raw, reads.onread, { allowHalfOpen: true });
      if (socket === undefined) return;
      reads.socket = socket;
      admission.admit(socket); // may drop the oldest unauthenticated socket
      listener.handshaking.add(socket);
      const hs = this.#handshake('server', options.secret);
      socketHandshake(socket, hs, this.#o.handshakeTimeoutMs, undefined).then(
        (leftover) => {
          admission.settle(socket);
          listener.handshaking.delete(socket);
          if (listener.closed) {
            socket.destroy();
            return;
          }
          const conn = new TcpConnection(socket, 'server', this.#settings(hs), leftover, reads);
          listener.emit('connection', conn);
        },
        (err: Error) => {
          admission.settle(socket);
          listener.handshaking.delete(socket);
          if (listener.listenerCount('reject') > 0) listener.emit('reject', err, remote);
        },
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) =>
        reject(
          new MuxError('ERR_MUX_INVALID_ARG', `listen on ${host}:${port}: ${err.message}`, {
            cause: err,
          }),
        ),
      );
      server.listen(port, host, () => resolve());
    });
    server.on('error', (err) => {
      if (listener.listenerCount('error') > 0) listener.emit('error', err);
    });
    void listener.port; // remembered now, for after close
    return listener;
  }
}

/** A listening TCP socket; emits authenticated connections. */
export class TcpListener extends EventEmitter<ListenerEvents> implements Listener {
  readonly host: string;
  readonly #server: net.Server;
  /** @internal Sockets still in the handshake: close() destroys them. */
  readonly handshaking = new Set<net.Socket>();
  #closed = false;

  constructor(server: net.Server, host: string) {
    super();
    this.#server = server;
    this.host = host;
  }

  #port = 0;

  /** The port listened on (still known after close). */
  get port(): number {
    if (this.#port === 0) {
      const a = this.#server.address();
      if (typeof a === 'object' && a !== null) this.#port = a.port;
    }
    return this.#port;
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    // net.Server's close callback waits for every accepted socket to end; connections made
    // stay open by contract, so resolve once the listening socket is gone instead.
    this.#server.close();
    for (const s of this.handshaking) s.destroy();
    this.handshaking.clear();
    return new Promise<void>((resolve) => setImmediate(resolve));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function frameProtectionOf(v: unknown): 'aead' | 'none' {
  if (v === undefined || v === 'aead' || v === 'none') return v ?? 'aead';
  throw new MuxError(
    'ERR_MUX_INVALID_ARG',
    `frameProtection must be 'aead' or 'none', got ${typeof v === 'string' ? `'${v}'` : typeof v}`,
  );
}
