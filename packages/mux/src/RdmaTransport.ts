import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { type Block, fromProtectionDomain, type RegisteredAllocator } from '@rdmajs/allocator';
import { SharedBudget } from '@rdmajs/flowctl';
import { type Device, openDevice, type ProtectionDomain, type ProviderName } from '@rdmajs/verbs';
import { MuxAbortError, MuxConnectionError, MuxError, MuxHandshakeError } from './errors.js';
import { FRAME_HEADER_BYTES } from './FrameHeader.js';
import {
  Handshake,
  type HandshakeLimits,
  MAX_FRAME_LIMIT,
  MIN_WINDOW_BYTES,
  PROTOCOL_VERSION,
  type SessionKeys,
} from './Handshake.js';
import { ablatedSettings } from './internal/ablatedSettings.js';
import { ControlLink } from './internal/ControlLink.js';
import { establish, type LocalSetup } from './internal/establish.js';
import { PeerResources } from './internal/PeerResources.js';
import { PollLoop } from './internal/PollLoop.js';
import { type ParsedRdmaTuning, parseRdmaTuning, type RdmaTuning } from './internal/RdmaOptions.js';
import { ABLATE_CREDITS } from './internal/RdmaSetup.js';
import { ReceivePool, type ReceivePoolStats } from './internal/ReceivePool.js';
import { WIRE_HEADER_BYTES } from './internal/WireHeader.js';
import {
  type PendingHandshakeLimits,
  type PendingHandshakeOptions,
  PendingHandshakes,
  pendingHandshakeLimits,
} from './PendingHandshakes.js';
import { RdmaConnection, type RdmaConnectionSettings } from './RdmaConnection.js';
import { RdmaListener } from './RdmaListener.js';
import { newIncarnation } from './ReadDescriptor.js';
import { ReadRegion } from './ReadRegion.js';
import { socketHandshake } from './socketHandshake.js';
import type { ConnectOptions, ListenOptions, SharedSecret, Transport } from './Transport.js';
import { checkInt, signalOf, timeoutOf } from './WaitOptions.js';

const MiB = 1024 * 1024;
/** What every connection of a transport may have in flight together, unless `budget` says. */
const DEFAULT_BUDGET = { maxBytes: 1024 * MiB, maxMessages: 1 << 20 } as const;
/** Registered memory of a transport (allocator, receive buffers, pools), unless `maxRegisteredBytes` says. */
const DEFAULT_MAX_REGISTERED_BYTES = 1024 * MiB;
/** Receive buffers the shared pool adds at least when it grows, and keeps spare. */
const POOL_STEP = 32;
/**
 * A read region's own arena: whole pages, at least this (the allocator's floor: its largest
 * slab, 8 blocks of 32 KiB), ...
 */
const REGION_MIN_ARENA = 256 * 1024;
/** ... at most this (the transport allocator's largest arena; beyond, a dedicated registration). */
const REGION_MAX_ARENA = 64 * MiB;

/** What `RdmaTransport.stats()` reports. */
export interface RdmaTransportStats {
  readonly connections: number;
  /** The shared receive pool: buffers, posted, leased (all connections), registered bytes. */
  readonly receivePool: ReceivePoolStats | undefined;
}

export interface RdmaTransportOptions extends RdmaTuning, PendingHandshakeOptions {
  /** The device to use (its PD and allocator are made here). Default: a soft device opened on first use. */
  device?: Device;
  /** Largest message this side accepts, bytes. Default 16 MiB. */
  maxMessageBytes?: number;
  /** Receive window: bytes (payloads + 16 per message) the peer may have sent and not had released. Default 64 MiB. */
  windowBytes?: number;
  /** Messages the peer may have sent and not had released. Default 65 536. */
  windowMessages?: number;
  /** Channels per connection (both sides'). Default 65 536. */
  maxChannels?: number;
  /** Deadline of every wait that names none. Default 30 000. */
  defaultTimeoutMs?: number;
  /** Handshake and setup deadline on the listening side. Default 10 000. */
  handshakeTimeoutMs?: number;
  /** Unauthenticated sockets a listener holds; when full, the oldest is dropped for a new one. Default 256. */
  maxPendingHandshakes?: number;
  /** Unauthenticated sockets per remote host (IPv4 address, IPv6 /64); its oldest is dropped beyond. Default 8. */
  maxPendingHandshakesPerHost?: number;
  /** The same for a loopback host (127/8, ::1: local processes, tests). Default `maxPendingHandshakes`. */
  maxPendingHandshakesPerLoopbackHost?: number;
  /** The peer's first handshake message must arrive within this. Default 2 000 (at most `handshakeTimeoutMs`). */
  firstMessageTimeoutMs?: number;
  /** A ping goes on the control connection when it was silent for half of this. Default 1 000. */
  heartbeatIntervalMs?: number;
  /** Fails the connection with ERR_MUX_PEER_TIMEOUT after this long without a control message. Default 5 000. */
  peerTimeoutMs?: number;
  /** Longest delay before owed credits and window space go back without other traffic. Default 5. */
  creditFlushMs?: number;
  /** Busy-poll after activity under pollPolicy 'adaptive', µs. Default 50. */
  spinUs?: number;
  /** Bytes and messages in flight over every connection of this transport. Default 1 GiB, 1 Mi. */
  budget?: { maxBytes: number; maxMessages: number };
  /** Largest RDMA READ work request; larger messages are read in chunks. Default 4 MiB. */
  readChunkBytes?: number;
  /**
   * Registered memory this transport may hold: its allocator, the shared receive pool (each
   * peer's lease of `recvCredits` buffers of `eagerThreshold` + 24 bytes, ≈ 576 KiB with the
   * defaults, more while it is busy) and every connection's pool. Default 1 GiB: 1 000 idle
   * connections take ≈ 610 MiB; beyond it a new connection fails with `ERR_ALLOC_LIMIT`.
   */
  maxRegisteredBytes?: number;
  /**
   * Send window cap per connection, whatever the peer announces (so one peer that never
   * releases cannot hold the whole budget). Default budget / 8 bytes (at least
   * maxMessageBytes + 16) and budget / 8 messages.
   */
  maxSendWindowBytes?: number;
  maxSendWindowMessages?: number;
  /** A peer must answer Done for a block offered by rendezvous within this. Default `defaultTimeoutMs`. */
  doneTimeoutMs?: number;
  /** Protocol version to announce. For tests of version rejection only. */
  protocolVersion?: number;
}

interface Resolved {
  maxMessageBytes: number;
  windowBytes: number;
  windowMessages: number;
  maxChannels: number;
  defaultTimeoutMs: number;
  handshakeTimeoutMs: number;
  maxPendingHandshakes: number;
  pending: PendingHandshakeLimits;
  heartbeatIntervalMs: number;
  peerTimeoutMs: number;
  creditFlushMs: number;
  spinUs: number;
  readChunkBytes: number;
  maxRegisteredBytes: number;
  protocolVersion: number;
  tuning: ParsedRdmaTuning;
  maxSendWindow: { maxBytes: number; maxMessages: number };
  doneTimeoutMs: number;
}

/**
 * The rdmajs messaging contract over RDMA verbs (soft provider by default): a TCP control
 * connection per peer runs the handshake, then the RDMA setup; a pool of RC QPs carries
 * every channel to that peer, eager messages by SEND, larger ones by rendezvous READ, with
 * receive credits and a send window per flowctl.
 */
export class RdmaTransport implements Transport {
  readonly name = 'rdma';
  readonly #o: Resolved;
  readonly #budget: SharedBudget;
  #device: Device | undefined;
  readonly #ownDevice: boolean;
  #pd: ProtectionDomain | undefined;
  #allocator: RegisteredAllocator | undefined;
  #pool: ReceivePool | undefined;
  #closed = false;
  readonly #connections = new Set<RdmaConnection>();
  /** One poll loop for every connection ('adaptive'), so idle-ish peers share its turns. */
  readonly #pollLoop: PollLoop | undefined;
  /** Read regions not closed yet (closed with the transport). */
  readonly #regions = new Set<ReadRegion>();
  /**
   * Random, drawn once: every read-region descriptor of this transport carries it, and peers
   * learn it in the setup, so a descriptor outliving this process (or given to the wrong
   * peer) is refused instead of read.
   */
  readonly incarnation: bigint = newIncarnation(randomBytes);

  constructor(options: RdmaTransportOptions = {}) {
    const o = options ?? {};
    const maxMessageBytes = checkInt(
      'maxMessageBytes',
      o.maxMessageBytes ?? 16 * MiB,
      0,
      MAX_FRAME_LIMIT,
    );
    const big = 2_147_483_647;
    const handshakeTimeoutMs = checkInt(
      'handshakeTimeoutMs',
      o.handshakeTimeoutMs ?? 10_000,
      1,
      big,
    );
    const maxPendingHandshakes = checkInt(
      'maxPendingHandshakes',
      o.maxPendingHandshakes ?? 256,
      1,
      1 << 20,
    );
    this.#o = {
      maxMessageBytes,
      windowBytes: checkInt(
        'windowBytes',
        o.windowBytes ?? Math.max(64 * MiB, maxMessageBytes + FRAME_HEADER_BYTES),
        Math.max(MIN_WINDOW_BYTES, maxMessageBytes + FRAME_HEADER_BYTES),
        0xffffffff,
      ),
      windowMessages: checkInt('windowMessages', o.windowMessages ?? 65_536, 1, 0xffffffff),
      maxChannels: checkInt('maxChannels', o.maxChannels ?? 65_536, 1, 1 << 30),
      defaultTimeoutMs: checkInt('defaultTimeoutMs', o.defaultTimeoutMs ?? 30_000, 1, big),
      handshakeTimeoutMs,
      maxPendingHandshakes,
      pending: pendingHandshakeLimits(o, maxPendingHandshakes, handshakeTimeoutMs),
      heartbeatIntervalMs: checkInt('heartbeatIntervalMs', o.heartbeatIntervalMs ?? 1_000, 10, big),
      peerTimeoutMs: checkInt('peerTimeoutMs', o.peerTimeoutMs ?? 5_000, 20, big),
      creditFlushMs: checkInt('creditFlushMs', o.creditFlushMs ?? 5, 0, 60_000),
      spinUs: checkInt('spinUs', o.spinUs ?? 50, 0, 1_000_000),
      readChunkBytes: checkInt('readChunkBytes', o.readChunkBytes ?? 4 * MiB, 4096, 1 << 30),
      maxRegisteredBytes: checkInt(
        'maxRegisteredBytes',
        o.maxRegisteredBytes ?? DEFAULT_MAX_REGISTERED_BYTES,
        16 * MiB,
        Number.MAX_SAFE_INTEGER,
      ),
      protocolVersion: checkInt(
        'protocolVersion',
        o.protocolVersion ?? PROTOCOL_VERSION,
        0,
        0xffff,
      ),
      tuning: parseRdmaTuning(o),
      ...sendLimits(o, maxMessageBytes, big),
    };
    if (this.#o.peerTimeoutMs <= this.#o.heartbeatIntervalMs) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        'peerTimeoutMs must be longer than heartbeatIntervalMs',
      );
    }
    const b = o.budget ?? DEFAULT_BUDGET;
    this.#budget = new SharedBudget({ maxBytes: b.maxBytes, maxMessages: b.maxMessages });
    this.#device = o.device;
    this.#ownDevice = o.device === undefined;
    this.#pollLoop =
      this.#o.tuning.pollPolicy === 'adaptive' ? new PollLoop(this.#o.spinUs) : undefined;
  }

  /**
   * The verbs provider this transport runs on (the `device` option's, else the default soft):
   * on soft the CPU of the side that posts a READ copies its bytes, on a NIC the NIC does.
   */
  get provider(): ProviderName {
    return this.#device?.provider ?? 'soft';
  }

  /**
   * Registered memory of this transport's device: messages built in its blocks are sent
   * without a copy ('remote-read' blocks also for rendezvous), and received messages live in
   * it. Opens the device on first use.
   */
  get allocator(): RegisteredAllocator {
    this.#open();
    return this.#allocator as RegisteredAllocator;
  }

  #open(): void {
    if (this.#closed) throw new MuxError('ERR_MUX_CLOSED', 'RdmaTransport: closed');
    if (this.#allocator !== undefined) return;
    this.#device ??= openDevice({ provider: 'soft' });
    this.#pd = this.#device.allocPd();
    this.#allocator = fromProtectionDomain(this.#pd, {
      arenaBytes: 16 * MiB,
      maxRegisteredBytes: this.#o.maxRegisteredBytes,
    });
    // One SRQ for every connection, as deep as the device allows and the registration limit
    // could fill; buffers are registered as leases need them.
    const bytes = this.#recvBufferBytes();
    const maxBuffers = Math.max(
      1,
      Math.min(this.#device.info.limits.maxSrqWr, Math.floor(this.#o.maxRegisteredBytes / bytes)),
    );
    this.#pool = new ReceivePool(this.#pd, this.#allocator, bytes, maxBuffers, POOL_STEP);
  }

  #recvBufferBytes(): number {
    return WIRE_HEADER_BYTES + Math.max(this.#o.tuning.eagerThreshold, 256);
  }

  /**
   * Memory peers may READ one-sidedly (`connection.read()` on their side): `bytes` (≥ 1)
   * of its own registration, remote-READ only, counted in `maxRegisteredBytes` (throws
   * ERR_ALLOC_LIMIT beyond). Hand its `descriptor` (`encodeReadDescriptor`) to the peers
   * meant to read it; `close()` it when they must not any more. It should live as long as
   * this transport: a peer's READ of a closed region fails that peer's read QP, and with it
   * every later read on that connection (`supportsRead` false, 'readsFailed').
   */
  allocReadRegion(bytes: number): ReadRegion {
    checkInt('bytes', bytes, 1, Number.MAX_SAFE_INTEGER);
    this.#open();
    const arena = Math.min(
      REGION_MAX_ARENA,
      Math.max(REGION_MIN_ARENA, Math.ceil(bytes / 4096) * 4096),
    );
    // A pool of its own: its arena (or dedicated registration) holds this block alone.
    const pool = this.allocator.forPeer({
      arenaBytes: arena,
      retainEmptyArenas: 0,
      defaultAccess: 'remote-read',
      label: 'read-region',
    });
    let block: Block;
    try {
      block = pool.alloc(bytes, 'remote-read');
    } catch (err) {
      pool.close();
      throw err;
    }
    const region = new ReadRegion(pool, block, this.incarnation, (r) => this.#regions.delete(r));
    this.#regions.add(region);
    return region;
  }

  /** Connections and the shared receive pool (undefined before the device is opened). */
  stats(): RdmaTransportStats {
    return { connections: this.#connections.size, receivePool: this.#pool?.stats() };
  }

  /**
   * Destroys its connections (ERR_MUX_CLOSED), then closes the allocator and (when this
   * transport opened it) the device. Close connections gracefully first. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const c of [...this.#connections]) c.destroy();
    for (const r of [...this.#regions]) r.close();
    this.#pool?.close();
    this.#allocator?.destroy();
    if (this.#ownDevice) this.#device?.close();
    else this.#pd?.close();
  }

  #limits(): HandshakeLimits {
    return {
      maxFrameBytes: Math.max(1, this.#o.maxMessageBytes),
      windowBytes: this.#o.windowBytes,
      windowMessages: this.#o.windowMessages,
    };
  }

  #handshake(role: 'client' | 'server', secret: SharedSecret): Handshake {
    return new Handshake({
      role,
      secret,
      limits: this.#limits(),
      version: this.#o.protocolVersion,
      transport: 'rdma',
    });
  }

  #localSetup(): LocalSetup {
    const t = this.#o.tuning;
    const count = t.recvCredits;
    return {
      recvBufferBytes: this.#recvBufferBytes(),
      recvBufferCount: t.recvBufferCount,
      flow: {
        version: 1,
        receiveCredits: count,
        reservedCredits: 1,
        returnThreshold: Math.max(2, Math.min(count - 1, count >> 2)),
        windowBytes: this.#o.windowBytes,
        windowMessages: this.#o.windowMessages,
        maxMessageBytes: t.eagerThreshold,
      },
      ablations: t.ablations,
      incarnation: this.incarnation,
    };
  }

  /** Setup after the handshake, then the connection. */
  async #establish(
    socket: net.Socket,
    leftover: Uint8Array,
    role: 'client' | 'server',
    hs: Handshake,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<RdmaConnection> {
    this.#open();
    const link = new ControlLink(socket, leftover, hs.sessionKeys as SessionKeys);
    const local = this.#localSetup();
    const { peer, resources } = await establish(
      link,
      role,
      local,
      (qps) =>
        new PeerResources(
          this.#device as Device,
          this.#pd as ProtectionDomain,
          this.#allocator as RegisteredAllocator,
          this.#pool as ReceivePool,
          qps,
          local.flow.receiveCredits,
          local.recvBufferCount,
          link.remoteAddress,
          (local.ablations & ABLATE_CREDITS) !== 0,
        ),
      this.#o.tuning.qpPoolSize + 1, // the channels' QPs and the read QP (RdmaConnection.read)
      timeoutMs,
      signal,
    );
    const o = this.#o;
    const settings: RdmaConnectionSettings = {
      local: this.#limits(),
      peer: hs.peerLimits as HandshakeLimits,
      maxChannels: o.maxChannels,
      defaultTimeoutMs: o.defaultTimeoutMs,
      heartbeatIntervalMs: o.heartbeatIntervalMs,
      peerTimeoutMs: o.peerTimeoutMs,
      creditFlushMs: o.creditFlushMs,
      pollPolicy: o.tuning.pollPolicy,
      pollLoop: this.#pollLoop,
      eagerLimit: Math.min(local.flow.maxMessageBytes, peer.flow.maxMessageBytes),
      sendCredits: {
        initialCredits: peer.flow.receiveCredits,
        reservedCredits: peer.flow.reservedCredits,
        maxCredits: peer.recvBufferCount,
      },
      leaseIdleMs: o.tuning.leaseIdleMs,
      receiveCredits: {
        initialCredits: local.flow.receiveCredits,
        reservedCredits: local.flow.reservedCredits,
        returnThreshold: local.flow.returnThreshold,
      },
      readChunkBytes: o.readChunkBytes,
      budget: this.#budget,
      maxSendWindow: o.maxSendWindow,
      doneTimeoutMs: o.doneTimeoutMs,
      peerIncarnation: peer.incarnation,
    };
    // Both sides agreed on them in the setup (establish); none: the settings as they are.
    const conn = new RdmaConnection(
      link,
      role,
      ablatedSettings(settings, local.ablations),
      resources,
    );
    this.#connections.add(conn);
    conn.once('close', () => this.#connections.delete(conn));
    return conn;
  }

  async connect(options: ConnectOptions): Promise<RdmaConnection> {
    if (options === null || typeof options !== 'object') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'connect options must be an object');
    }
    const port = checkInt('port', options.port, 1, 65_535);
    const host = options.host ?? '127.0.0.1';
    const timeoutMs = timeoutOf(options, this.#o.defaultTimeoutMs);
    const signal = signalOf(options);
    const hs = this.#handshake('client', options.secret);
    if (signal?.aborted === true) throw new MuxAbortError('connect', signal.reason);
    this.#open(); // device trouble surfaces before any peer is contacted
    const started = performance.now();
    const socket = net.connect({ host, port, allowHalfOpen: true, noDelay: true });
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
              {
                retryable: true,
              },
            ),
          ),
        timeoutMs,
      );
      socket.once('connect', onConnect);
      socket.once('error', onError);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    const left = () => Math.max(1, timeoutMs - (performance.now() - started));
    const leftover = await socketHandshake(socket, hs, left(), signal);
    return this.#establish(socket, leftover, 'client', hs, left(), signal);
  }

  async listen(options: ListenOptions): Promise<RdmaListener> {
    if (options === null || typeof options !== 'object') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'listen options must be an object');
    }
    this.#handshake('server', options.secret); // validates the secret now, not per peer
    this.#open();
    const host = options.host ?? '127.0.0.1';
    const port = checkInt('port', options.port ?? 0, 0, 65_535);
    const server = net.createServer({ allowHalfOpen: true, noDelay: true });
    const listener = new RdmaListener(server, host);
    const reject = (err: Error, remote: string) => {
      if (listener.listenerCount('reject') > 0) listener.emit('reject', err, remote);
    };
    const admission = new PendingHandshakes(this.#o.pending);
    server.on('connection', (socket) => {
      const remote = `${socket.remoteAddress}:${socket.remotePort}`;
      if (listener.closed) {
        socket.destroy();
        reject(
          new MuxHandshakeError('ERR_MUX_HANDSHAKE', 'handshake (server): the listener is closed'),
          remote,
        );
        return;
      }
      admission.admit(socket); // may drop the oldest unauthenticated socket
      listener.pending.add(socket);
      const hs = this.#handshake('server', options.secret);
      const started = performance.now();
      const budget = this.#o.handshakeTimeoutMs;
      socketHandshake(socket, hs, budget, undefined)
        .then((leftover) => {
          admission.settle(socket); // authenticated: the setup has its own deadline
          return this.#establish(
            socket,
            leftover,
            'server',
            hs,
            Math.max(1, budget - (performance.now() - started)),
            undefined,
          );
        })
        .then(
          (conn) => {
            listener.pending.delete(socket);
            if (listener.closed) {
              conn.destroy();
              return;
            }
            listener.emit('connection', conn);
          },
          (err: Error) => {
            admission.settle(socket);
            listener.pending.delete(socket);
            reject(err, remote);
          },
        );
    });
    await new Promise<void>((resolve, rejectListen) => {
      server.once('error', (err) =>
        rejectListen(
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
    void listener.port;
    return listener;
  }
}

/** The per-connection send caps, from the options and the budget they are a share of. */
function sendLimits(
  o: RdmaTransportOptions,
  maxMessageBytes: number,
  big: number,
): Pick<Resolved, 'maxSendWindow' | 'doneTimeoutMs'> {
  const b = o.budget ?? DEFAULT_BUDGET;
  const floor = maxMessageBytes + FRAME_HEADER_BYTES;
  return {
    maxSendWindow: {
      maxBytes: checkInt(
        'maxSendWindowBytes',
        o.maxSendWindowBytes ?? Math.max(floor, Math.floor(b.maxBytes / 8)),
        1,
        0xffffffff,
      ),
      maxMessages: checkInt(
        'maxSendWindowMessages',
        o.maxSendWindowMessages ?? Math.max(1, Math.floor(b.maxMessages / 8)),
        1,
        0xffffffff,
      ),
    },
    doneTimeoutMs: checkInt(
      'doneTimeoutMs',
      o.doneTimeoutMs ?? o.defaultTimeoutMs ?? 30_000,
      1,
      big,
    ),
  };
}
