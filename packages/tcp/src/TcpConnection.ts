import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { Block, RegisteredAllocator } from '@rdmajs/allocator';
import { FlowctlError, SendWindow } from '@rdmajs/flowctl';
import {
  type Connection,
  type ConnectionEvents,
  type ConnectionState,
  type ConnectionStats,
  CREDIT_PAYLOAD_BYTES,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameHeader,
  FrameType,
  type HandshakeLimits,
  InboundMessage,
  MAX_CHANNEL_NAME_BYTES,
  type MessagePart,
  MuxAbortError,
  MuxClosedError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxProtocolError,
  messageViews,
  type OutboundMessage,
  PING_PAYLOAD_BYTES,
  type ReadDescriptor,
  type ReadList,
  readU32,
  type SendOptions,
  type SessionKeys,
  signalOf,
  timeoutOf,
  type WaitOptions,
  writeU32,
} from '@rdmajs/mux';
import type { FrameOutput } from './internal/FrameOutput.js';
import { FrameReader, type FrameSink } from './internal/FrameReader.js';
import { ReceiveSlabs, type Slab } from './internal/ReceiveSlabs.js';
import { RecordOpener } from './internal/RecordOpener.js';
import { SealedWriter } from './internal/SealedWriter.js';
import type { SocketReads } from './internal/SocketReads.js';
import { TcpChannel } from './TcpChannel.js';

/** Settings of a connection, resolved by the transport. */
export interface TcpConnectionSettings {
  /** What this side announced (it enforces them on the peer). */
  local: HandshakeLimits;
  /** What the peer announced (this side respects them). */
  peer: HandshakeLimits;
  maxChannels: number;
  defaultTimeoutMs: number;
  heartbeatIntervalMs: number;
  peerTimeoutMs: number;
  creditFlushMs: number;
  /** Received payloads are copied into blocks of this allocator (else into recycled slabs). */
  receiveAllocator: RegisteredAllocator | undefined;
  /** This side's cap on the send window (the peer's announced window is only an upper bound). */
  maxSendWindow: { maxBytes: number; maxMessages: number };
  /** A send waits for 'drain' while the socket holds more than this, unwritten. */
  maxSocketBacklogBytes: number;
  /** The handshake's session keys when frames travel sealed; undefined: in clear. */
  sealWith: SessionKeys | undefined;
}

/** Frame headers are cut from slabs: one allocation per 4096 frames, not one per frame. */
const HEADER_SLAB = 64 * 1024;

/**
 * One TCP connection after the handshake: channels multiplexed in length-prefixed frames
 * (sealed in authenticated, encrypted records when the transport says so: SealedWriter,
 * RecordOpener), writes batched per tick (cork/uncork), a send window per flowctl that the peer refills
 * with credit frames as its application releases messages, heartbeats both ways.
 */
export class TcpConnection extends EventEmitter<ConnectionEvents> implements Connection, FrameSink {
  readonly role: 'client' | 'server';
  readonly remoteAddress: string;
  readonly defaultTimeoutMs: number;
  readonly maxFrameBytes: number;
  readonly #socket: Socket;
  /** The socket, or a SealedWriter in front of it. */
  readonly #out: FrameOutput;
  /** Opens sealed records before the frame parser sees a byte (sealed connections only). */
  readonly #opener: RecordOpener | undefined;
  readonly #settings: TcpConnectionSettings;
  readonly #window: SendWindow;
  readonly #reader: FrameReader;
  readonly #channels = new Map<number, TcpChannel>();
  #open = 0;
  #nextId: number;
  #state: ConnectionState = 'open';
  #error: Error | undefined;
  #corked = false;
  #slab = Buffer.allocUnsafeSlow(HEADER_SLAB);
  #slabOff = 0;
  readonly #views: Uint8Array[] = [];
  /** Writes handed to the socket whose callback has not run. */
  #pendingWrites = 0;
  /** Data frames written and not yet taken by the socket: resolve, reject, … oldest first. */
  readonly #writeSettles: (((e: Error) => void) | (() => void) | undefined)[] = [];
  #settleHead = 0;
  /** Settles at the socket's next 'drain' (or close): sends over the backlog bound wait on it. */
  #drained: Promise<void> | undefined;
  #writesIdle: (() => void) | undefined;
  // Receive window accounting (what the peer has sent and the application not released).
  #peerBytes = 0;
  #peerMessages = 0;
  #held = 0;
  #maxHeld = 0;
  #creditBytes = 0;
  #creditMessages = 0;
  #creditTimer: NodeJS.Timeout | undefined;
  #creditScheduled = false;
  #assembling: Block | undefined;
  /** Receive memory when there is no receive allocator. */
  readonly #slabs = new ReceiveSlabs();
  /** The release callback of messages cut from each slab (at most MAX_SLABS). */
  readonly #slabReleases = new Map<Slab, (m: InboundMessage) => void>();
  /** Last socket read / write (performance.now(): monotonic, so a wall-clock step fails no peer). */
  #lastRead = performance.now();
  #lastWrite = performance.now();
  #heartbeat: NodeJS.Timeout;
  #peerGoAway = false;
  /** This side ended its socket (after its goaway, or the peer's): nothing more is written. */
  #ended = false;
  #stats = {
    messagesSent: 0,
    bytesSent: 0,
    messagesReceived: 0,
    bytesReceived: 0,
    sendStalls: 0,
    framesOut: 0,
    framesIn: 0,
    writes: 0,
  };
  readonly #onRelease = (m: InboundMessage) => this.#released(m.length + FRAME_HEADER_BYTES);
  readonly #onReleaseBlock = new WeakMap<InboundMessage, Block>();

  constructor(
    socket: Socket,
    role: 'client' | 'server',
    settings: TcpConnectionSettings,
    leftover: Uint8Array,
    reads: SocketReads,
  ) {
    super();
    this.#socket = socket;
    this.role = role;
    this.#settings = settings;
    this.defaultTimeoutMs = settings.defaultTimeoutMs;
    this.maxFrameBytes = settings.local.maxFrameBytes;
    this.remoteAddress = `${socket.remoteAddress}:${socket.remotePort}`;
    this.#nextId = role === 'client' ? 1 : 2;
    // What we queue for a peer is bounded by us, not by what it announces.
    this.#window = new SendWindow({
      maxBytes: Math.min(settings.peer.windowBytes, settings.maxSendWindow.maxBytes),
      maxMessages: Math.min(settings.peer.windowMessages, settings.maxSendWindow.maxMessages),
      defaultTimeoutMs: settings.defaultTimeoutMs,
      maxQueued: 1 << 20,
    });
    this.#reader = new FrameReader(this);
    const keys = settings.sealWith;
    this.#out = keys === undefined ? socket : new SealedWriter(socket, keys.send);
    this.#opener =
      keys === undefined
        ? undefined
        : new RecordOpener(keys.receive, (plaintext) => {
            if (this.#state !== 'failed' && this.#state !== 'closed') this.#reader.push(plaintext);
          });
    socket.setNoDelay(true);
    socket.setKeepAlive(true, settings.heartbeatIntervalMs);
    // The handshake left the socket paused: nothing is read until resume() below. Reads land
    // in a buffer the next read reuses (SocketReads): #onData copies what it keeps.
    reads.sink = (chunk) => this.#onData(chunk);
    socket.on('end', () => this.#onEnd());
    socket.on('error', (err) => this.#lost(err));
    socket.on('close', () => this.#onSocketClose());
    this.#heartbeat = setInterval(
      () => this.#tick(),
      Math.max(10, settings.heartbeatIntervalMs / 2),
    );
    this.#heartbeat.unref();
    // After the caller's continuation, so its 'channel' listener sees the first frames; the
    // bytes that came with the last handshake message go first, then the socket flows.
    setImmediate(() => {
      if (leftover.length > 0) this.#onData(leftover);
      if (this.#state === 'open' || this.#state === 'closing') socket.resume();
    });
  }

  get state(): ConnectionState {
    return this.#state;
  }

  /** FrameSink: nothing more is parsed once the connection failed or closed. */
  get ended(): boolean {
    return this.#state === 'failed' || this.#state === 'closed';
  }

  get error(): Error | undefined {
    return this.#error;
  }

  get channelCount(): number {
    return this.#open;
  }

  openChannel(name = ''): TcpChannel {
    this.#checkOpen('openChannel');
    if (typeof name !== 'string')
      throw new MuxError('ERR_MUX_INVALID_ARG', 'channel name must be a string');
    const nameBytes = Buffer.from(name, 'utf8');
    if (nameBytes.length > MAX_CHANNEL_NAME_BYTES) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        `channel name longer than ${MAX_CHANNEL_NAME_BYTES} bytes`,
      );
    }
    if (this.#open >= this.#settings.maxChannels) {
      throw new MuxError('ERR_MUX_INVALID_ARG', `more than ${this.#settings.maxChannels} channels`);
    }
    const id = this.#nextId;
    if (id > 0xffffffff) throw new MuxError('ERR_MUX_INVALID_ARG', 'channel ids exhausted');
    this.#nextId += 2;
    const ch = new TcpChannel(this, id, name);
    this.#channels.set(id, ch);
    this.#open++;
    this.#writeFrame(FrameType.Open, id, 0, nameBytes);
    return ch;
  }

  /** The send path of every channel. */
  async sendOn(ch: TcpChannel, message: OutboundMessage, options?: SendOptions): Promise<void> {
    const transfer = options?.transfer === true;
    try {
      if (!ch.sendable) throw this.#error ?? new MuxClosedError(`channel ${ch.id}`);
      this.#checkOpen('send');
      const views = messageViews(message, this.#views);
      let length = 0;
      for (const v of views) length += v.length;
      if (length > this.#settings.peer.maxFrameBytes) {
        throw new MuxError(
          'ERR_MUX_TOO_LARGE',
          `message of ${length} bytes; the peer accepts at most ${this.#settings.peer.maxFrameBytes}`,
        );
      }
      const charge = length + FRAME_HEADER_BYTES;
      const timeoutMs = timeoutOf(options, this.defaultTimeoutMs);
      const signal = signalOf(options);
      ch.pendingSends++;
      let counted = true;
      try {
        let got: boolean;
        try {
          got = this.#window.tryAcquire(charge);
        } catch (err) {
          throw this.#mapFlowctl(err, timeoutMs);
        }
        if (!got) {
          ch.sendStalls++;
          this.#stats.sendStalls++;
          const giveUp = ch.giveUpSignal();
          try {
            await this.#acquire(
              ch,
              charge,
              timeoutMs,
              signal === undefined ? giveUp : AbortSignal.any([signal, giveUp]),
            );
          } catch (err) {
            // Given up by the channel's close(), not by the caller's signal.
            if (giveUp.aborted && signal?.aborted !== true)
              throw new MuxClosedError(`channel ${ch.id}`, giveUp.reason);
            throw err;
          }
          // The window may have opened because the channel or connection is going away.
          // (Sends already waiting still go while their channel or connection closes.)
          const st = this.#state;
          if (
            st === 'failed' ||
            st === 'closed' ||
            ch.state === 'failed' ||
            ch.state === 'closed'
          ) {
            // Nothing goes on the wire, so the space taken comes back here, not by credit
            // (a destroyed window ignores it).
            this.#window.release(charge);
            throw this.#error ?? new MuxClosedError(`channel ${ch.id}`);
          }
        }
        // A peer that stops reading must not make us queue its whole window in the socket.
        const deadline = performance.now() + timeoutMs;
        while (this.#out.writableLength > this.#settings.maxSocketBacklogBytes) {
          try {
            await this.#drainOnce(deadline, timeoutMs, signal);
          } catch (err) {
            this.#window.release(charge); // nothing went on the wire
            throw err;
          }
        }
        // Views are taken again after the wait (cheap, no copies): #views is shared.
        const parts = messageViews(message, this.#views);
        const done = this.#writeData(ch, parts, length);
        ch.messagesSent++;
        ch.bytesSent += length;
        this.#stats.messagesSent++;
        this.#stats.bytesSent += length;
        counted = false;
        ch.sendDone();
        await done;
      } catch (err) {
        if (counted) ch.sendDone();
        throw err;
      }
    } finally {
      if (transfer) releaseParts(message);
    }
  }

  /**
   * One wait for the socket's next 'drain' (or close), bounded by the send's deadline. The
   * caller re-checks the backlog and writes in the same microtask, so the senders woken by
   * one drain go one by one, not all at once.
   */
  async #drainOnce(deadline: number, timeoutMs: number, signal: AbortSignal | undefined) {
    const s = this.#socket;
    this.#drained ??= new Promise<void>((resolve) => {
      const done = () => {
        s.off('drain', done);
        s.off('close', done);
        this.#drained = undefined;
        resolve();
      };
      s.on('drain', done);
      s.on('close', done);
    });
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stop = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new MuxDeadlineError('send (socket backlog)', timeoutMs)),
        Math.max(0, deadline - performance.now()),
      );
      onAbort = () => reject(new MuxAbortError('send', signal?.reason));
      if (signal?.aborted === true) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
    try {
      await Promise.race([this.#drained, stop]);
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
    }
    if (this.#state === 'failed' || this.#state === 'closed')
      throw this.#error ?? new MuxClosedError('send');
  }

  async #acquire(
    ch: TcpChannel,
    charge: number,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    try {
      await this.#window.acquire(
        charge,
        signal === undefined
          ? { channel: ch.id, timeoutMs }
          : { channel: ch.id, timeoutMs, signal },
      );
    } catch (err) {
      throw this.#mapFlowctl(err, timeoutMs);
    }
  }

  #mapFlowctl(err: unknown, timeoutMs: number): Error {
    if (err instanceof FlowctlError) {
      if (err.code === 'ERR_FLOWCTL_DEADLINE')
        return new MuxDeadlineError('send (window full)', timeoutMs);
      if (err.code === 'ERR_FLOWCTL_ABORTED') return new MuxAbortError('send', err.cause);
      if (err.code === 'ERR_FLOWCTL_TOO_LARGE') {
        return new MuxError('ERR_MUX_TOO_LARGE', `message larger than the send window`, {
          cause: err,
        });
      }
      return this.#error ?? new MuxClosedError('send', err);
    }
    return err as Error;
  }

  /** Writes a Data frame; resolves when the socket has taken every part. */
  #writeData(ch: TcpChannel, parts: Uint8Array[], length: number): Promise<void> {
    // A destroyed socket calls a new write back at once, ahead of the writes still in flight:
    // refused here, so the callbacks left keep write order.
    if (this.#writeFailure !== undefined || this.#socket.destroyed)
      return Promise.reject(this.#writeFailure ?? this.#writeError());
    const header = this.#headerSpace();
    encodeFrameHeader(header, 0, FrameType.Data, ch.id, ch.sendSeq, length);
    ch.sendSeq = (ch.sendSeq + 1) >>> 0;
    this.#cork();
    const s = this.#out;
    this.#stats.framesOut++;
    let last = -1;
    for (let i = parts.length - 1; i >= 0; i--) {
      if ((parts[i] as Uint8Array).length > 0) {
        last = i;
        break;
      }
    }
    return new Promise<void>((resolve, reject) => {
      this.#writeSettles.push(resolve, reject);
      this.#pendingWrites++;
      const cb = this.#dataWritten;
      s.write(header, last < 0 ? cb : undefined);
      for (let i = 0; i <= last; i++) {
        const p = parts[i] as Uint8Array;
        if (p.length > 0) s.write(p, i === last ? cb : undefined);
      }
    });
  }

  /** The first data write that failed: every send after it settles with this. */
  #writeFailure: Error | undefined;

  /**
   * The write callback of every data frame (one per frame, on its last chunk): the socket
   * calls write callbacks in write order, so it settles the oldest send — no closure per send.
   */
  readonly #dataWritten = (err?: Error | null): void => {
    const settles = this.#writeSettles;
    const h = this.#settleHead;
    const resolve = settles[h] as () => void;
    const reject = settles[h + 1] as (e: Error) => void;
    settles[h] = settles[h + 1] = undefined;
    this.#settleHead = h + 2;
    if (this.#settleHead === settles.length) {
      settles.length = 0;
      this.#settleHead = 0;
    } else if (this.#settleHead > 1024 && this.#settleHead * 2 > settles.length) {
      // Never drained under steady load: the settled front goes, the array stays bounded.
      settles.copyWithin(0, this.#settleHead);
      settles.length -= this.#settleHead;
      this.#settleHead = 0;
    }
    this.#writeDone();
    // After one failed write no later one counts as written: a dying socket may call back out
    // of order, and a null after an error is no proof the bytes left.
    if (err) this.#writeFailure ??= this.#writeError(err);
    if (this.#writeFailure !== undefined) reject(this.#writeFailure);
    else resolve();
  };

  /** The error a send that did not go out settles with. */
  #writeError(cause?: Error): Error {
    return this.#error ?? new MuxConnectionError('ERR_MUX_CONNECTION_LOST', 'write failed', cause);
  }

  /** Control frames: fire and forget (errors fail the connection through the socket). */
  #writeFrame(
    type: FrameType,
    channel: number,
    seq: number,
    payload: Uint8Array | undefined,
  ): void {
    // A credit or Close after our end would fail the socket (write after end), and after
    // our goaway the peer takes any frame for a protocol violation.
    if (this.#ended) return;
    const header = this.#headerSpace();
    encodeFrameHeader(header, 0, type, channel, seq, payload?.length ?? 0);
    this.#cork();
    this.#stats.framesOut++;
    this.#out.write(header);
    if (payload !== undefined && payload.length > 0) this.#out.write(payload);
  }

  #headerSpace(): Uint8Array {
    if (this.#slabOff + FRAME_HEADER_BYTES > HEADER_SLAB) {
      this.#slab = Buffer.allocUnsafeSlow(HEADER_SLAB);
      this.#slabOff = 0;
    }
    const h = this.#slab.subarray(this.#slabOff, this.#slabOff + FRAME_HEADER_BYTES);
    this.#slabOff += FRAME_HEADER_BYTES;
    return h;
  }

  /** Batches every write of this tick into one writev. */
  #cork(): void {
    this.#lastWrite = performance.now();
    if (this.#corked) return;
    this.#corked = true;
    this.#out.cork();
    process.nextTick(() => {
      this.#corked = false;
      this.#stats.writes++;
      this.#out.uncork();
    });
  }

  #writeDone(): void {
    this.#pendingWrites--;
    if (this.#pendingWrites === 0 && this.#writesIdle !== undefined) {
      const f = this.#writesIdle;
      this.#writesIdle = undefined;
      f();
    }
  }

  // ---- receive path (FrameSink) ----

  knownChannel(id: number): boolean {
    const ch = this.#channels.get(id);
    return ch !== undefined && !ch.peerClosed;
  }

  header(h: Readonly<FrameHeader>): void {
    this.#stats.framesIn++;
    if (this.#peerGoAway) throw new MuxProtocolError('frame after goaway');
    if (h.type === FrameType.Data) {
      const ch = this.#channels.get(h.channel) as TcpChannel;
      if (h.seq !== ch.recvSeq) {
        throw new MuxProtocolError(
          `channel ${h.channel}: sequence ${h.seq}, expected ${ch.recvSeq}`,
        );
      }
      ch.recvSeq = (ch.recvSeq + 1) >>> 0;
      const charge = h.length + FRAME_HEADER_BYTES;
      const local = this.#settings.local;
      if (
        this.#peerBytes + charge > local.windowBytes ||
        this.#peerMessages + 1 > local.windowMessages
      ) {
        throw new MuxProtocolError(
          `the peer overran the receive window (${this.#peerBytes + charge} bytes, ${this.#peerMessages + 1} messages)`,
        );
      }
      this.#peerBytes += charge;
      this.#peerMessages++;
      this.#held += charge;
      if (this.#held > this.#maxHeld) this.#maxHeld = this.#held;
      // Credit owed from earlier releases may be what the peer's next message waits for now
      // that this one filled its view past half: not left to the flush delay.
      if (this.#creditMessages > 0 && this.#peerMayStall()) this.#scheduleCredit();
    } else if (h.type === FrameType.Open) {
      if (h.channel % 2 !== (this.role === 'client' ? 0 : 1)) {
        throw new MuxProtocolError(
          `the peer opened channel ${h.channel}, which is not its to open`,
        );
      }
      if (this.#channels.has(h.channel))
        throw new MuxProtocolError(`channel ${h.channel} opened twice`);
      if (this.#open >= this.#settings.maxChannels) {
        throw new MuxProtocolError(
          `the peer opened more than ${this.#settings.maxChannels} channels`,
        );
      }
    }
  }

  payloadSpace(length: number): Uint8Array {
    const a = this.#settings.receiveAllocator;
    // An empty message takes no block (the allocator refuses size 0). An allocator at its
    // limit does not fail this connection: it may be shared by every connection of the
    // process, and one client holding its messages must not fail the others. The payload goes
    // to the connection's slabs then, bounded by its receive window like any other.
    if (a === undefined || length === 0) return this.#slabs.take(length);
    let block: Block;
    try {
      block = a.alloc(length);
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'ERR_ALLOC_LIMIT') throw err;
      return this.#slabs.take(length);
    }
    this.#assembling = block;
    return block.bytes.subarray(0, length);
  }

  frame(h: Readonly<FrameHeader>, payload: Uint8Array): void {
    switch (h.type) {
      case FrameType.Data: {
        const ch = this.#channels.get(h.channel) as TcpChannel;
        this.#stats.messagesReceived++;
        this.#stats.bytesReceived += payload.length;
        const block = this.#assembling;
        let m: InboundMessage;
        if (block !== undefined) {
          this.#assembling = undefined;
          m = new InboundMessage(h.channel, h.seq, payload, this.#onReleaseWithBlock, block);
          this.#onReleaseBlock.set(m, block);
        } else {
          const slab = this.#slabs.last;
          m = new InboundMessage(
            h.channel,
            h.seq,
            payload,
            slab === undefined ? this.#onRelease : this.#slabRelease(slab),
          );
        }
        ch.deliver(m);
        break;
      }
      case FrameType.Open: {
        const name = Buffer.from(payload.buffer, payload.byteOffset, payload.length).toString(
          'utf8',
        );
        const ch = new TcpChannel(this, h.channel, name);
        this.#channels.set(h.channel, ch);
        this.#open++;
        this.emit('channel', ch);
        break;
      }
      case FrameType.Close: {
        const ch = this.#channels.get(h.channel) as TcpChannel;
        ch.peerClose();
        this.#maybeForget(ch);
        break;
      }
      case FrameType.Credit:
        this.#credit(readU32(payload, 0), readU32(payload, 4));
        break;
      case FrameType.Ping:
      case FrameType.Pong:
        // Liveness only: any frame proves the peer alive, and each side pings on its own
        // when idle. Not answered, so a peer that never reads cannot make us buffer pongs.
        break;
      case FrameType.GoAway:
        this.#peerGoAway = true;
        for (const ch of this.#channels.values()) ch.peerClose();
        void this.#peerClosing();
        break;
    }
  }

  #slabRelease(slab: Slab): (m: InboundMessage) => void {
    let f = this.#slabReleases.get(slab);
    if (f === undefined) {
      f = (m) => {
        slab.unpin();
        this.#onRelease(m);
      };
      this.#slabReleases.set(slab, f);
    }
    return f;
  }

  readonly #onReleaseWithBlock = (m: InboundMessage) => {
    const block = this.#onReleaseBlock.get(m);
    this.#onReleaseBlock.delete(m);
    if (block !== undefined && !block.released) block.release();
    this.#released(m.length + FRAME_HEADER_BYTES);
  };

  /** The peer released `messages` messages of `bytes` (headers included) in total. */
  #credit(messages: number, bytes: number): void {
    if (
      messages === 0 ||
      messages > this.#window.messagesInFlight ||
      bytes > this.#window.bytesInFlight ||
      bytes < messages * FRAME_HEADER_BYTES
    ) {
      throw new MuxProtocolError(
        `credit for ${messages} messages, ${bytes} bytes: more than was sent`,
      );
    }
    try {
      // The wire carries totals (the receiver releases in any order, so it cannot name
      // messages); SendWindow.release takes one message at a time. Only the totals matter to
      // the window, so the bytes go with the last message. When every message in flight is
      // credited the bytes must match exactly, which SendWindow checks.
      for (let i = 1; i < messages; i++) this.#window.release(0);
      this.#window.release(bytes);
    } catch (err) {
      throw new MuxProtocolError(`bad credit: ${(err as Error).message}`);
    }
  }

  /** The application released a received message: its window space goes back to the peer. */
  #released(charge: number): void {
    this.#held -= charge;
    if (this.#state === 'failed' || this.#state === 'closed') return;
    this.#creditBytes += charge;
    this.#creditMessages++;
    this.#peerBytes -= charge;
    this.#peerMessages--;
    const local = this.#settings.local;
    // The peer's view of its window: what we hold plus what we released and not yet
    // credited. Past half of it the peer may be about to stall: credit within this tick.
    // Below, credit waits up to creditFlushMs and goes as one frame for many releases (a
    // frame per release would double the writes and reads of a request/response pattern).
    if (
      this.#peerMayStall() ||
      this.#creditBytes >= local.windowBytes / 4 ||
      this.#creditMessages >= local.windowMessages / 4
    ) {
      this.#scheduleCredit();
    } else if (this.#creditTimer === undefined) {
      // Bounded delay: credit below the thresholds is never stranded.
      this.#creditTimer = setTimeout(() => {
        this.#creditTimer = undefined;
        this.#flushCredit();
      }, this.#settings.creditFlushMs);
    }
  }

  /** The peer's view of its window (held plus released, not yet credited) is past half. */
  #peerMayStall(): boolean {
    const local = this.#settings.local;
    return (
      this.#peerBytes + this.#creditBytes >= local.windowBytes / 2 ||
      this.#peerMessages + this.#creditMessages >= local.windowMessages / 2
    );
  }

  #scheduleCredit(): void {
    if (this.#creditScheduled) return;
    this.#creditScheduled = true;
    process.nextTick(() => {
      this.#creditScheduled = false;
      this.#flushCredit();
    });
  }

  #flushCredit(): void {
    if (this.#creditMessages === 0 || this.#state === 'failed' || this.#state === 'closed') return;
    if (this.#creditTimer !== undefined) {
      clearTimeout(this.#creditTimer);
      this.#creditTimer = undefined;
    }
    const p = Buffer.allocUnsafe(CREDIT_PAYLOAD_BYTES);
    writeU32(p, 0, this.#creditMessages);
    writeU32(p, 4, this.#creditBytes);
    this.#creditMessages = 0;
    this.#creditBytes = 0;
    this.#writeFrame(FrameType.Credit, 0, 0, p);
  }

  #onData(chunk: Uint8Array): void {
    this.#lastRead = performance.now();
    if (this.#state === 'failed' || this.#state === 'closed') return;
    try {
      if (this.#opener === undefined) this.#reader.push(chunk);
      else this.#opener.push(chunk);
    } catch (err) {
      // Typed errors (ours, or the receive allocator's ERR_ALLOC_*) fail the connection as is.
      const typed = typeof (err as { code?: unknown })?.code === 'string';
      this.destroy(typed ? (err as Error) : new MuxProtocolError(String((err as Error).message)));
    }
  }

  readonly #forgetSlab = (slab: Slab) => {
    this.#slabReleases.delete(slab);
  };

  #tick(): void {
    this.#slabs.trimIdle(this.#forgetSlab);
    const now = performance.now();
    if (now - this.#lastRead > this.#settings.peerTimeoutMs) {
      // Timers run before I/O: after our own event loop was blocked, the peer's frames may
      // be waiting in the kernel. Decide after the next poll phase has read them.
      setImmediate(() => {
        if (performance.now() - this.#lastRead <= this.#settings.peerTimeoutMs) return;
        this.destroy(
          new MuxConnectionError(
            'ERR_MUX_PEER_TIMEOUT',
            `no frame from ${this.remoteAddress} for ${this.#settings.peerTimeoutMs} ms`,
          ),
        );
      });
      return;
    }
    if (this.#state === 'open' && now - this.#lastWrite >= this.#settings.heartbeatIntervalMs / 2) {
      this.#writeFrame(FrameType.Ping, 0, 0, new Uint8Array(PING_PAYLOAD_BYTES));
    }
  }

  #onEnd(): void {
    // After a goaway either side's close() ends the socket once its writes are flushed.
    if (this.#peerGoAway || this.#state === 'closing') return;
    this.#lost(undefined);
  }

  /**
   * The peer said goaway: no new sends; what it sent stays receivable; the socket ends
   * once this side's writes are flushed.
   */
  async #peerClosing(): Promise<void> {
    if (this.#state !== 'open') return;
    this.#setState('closing');
    this.#window.close();
    if (this.#pendingWrites > 0) {
      await new Promise<void>((resolve) => {
        this.#writesIdle = resolve;
      });
    }
    if (this.state === 'closing') this.#end();
  }

  #onSocketClose(): void {
    if (this.#state === 'closing' || (this.#peerGoAway && this.#state === 'open')) {
      this.#finish();
      return;
    }
    this.#lost(undefined);
  }

  #lost(cause: unknown): void {
    if (this.#state === 'failed' || this.#state === 'closed') return;
    this.destroy(
      new MuxConnectionError(
        'ERR_MUX_CONNECTION_LOST',
        `connection to ${this.remoteAddress} lost`,
        cause,
      ),
    );
  }

  /** Ends the socket once: the frames written before it still go. */
  #end(): void {
    this.#ended = true;
    this.#out.end();
  }

  /** A channel closed on this side (after the peer's goaway it needs no Close: that ended all). */
  channelClosed(ch: TcpChannel): void {
    if ((this.#state === 'open' || this.#state === 'closing') && !this.#peerGoAway)
      this.#writeFrame(FrameType.Close, ch.id, 0, undefined);
    this.#maybeForget(ch);
  }

  #maybeForget(ch: TcpChannel): void {
    if (
      ch.peerClosed &&
      ch.state !== 'open' &&
      ch.state !== 'closing' &&
      this.#channels.get(ch.id) === ch
    ) {
      this.#channels.delete(ch.id);
      this.#open--;
    } else if (ch.peerClosed && ch.state === 'open') {
      // The peer is done sending; the channel stays until this side closes it.
    }
  }

  async close(options?: WaitOptions): Promise<void> {
    const timeoutMs = timeoutOf(options, this.defaultTimeoutMs);
    const signal = signalOf(options);
    if (this.#state === 'closed' || this.#state === 'failed') return;
    // Past the deadline, or on abort, the connection is destroyed and close() rejects.
    let late: MuxError | undefined;
    const giveUp = (err: MuxError) => {
      late = err;
      this.destroy(err);
    };
    const timer = setTimeout(
      () => giveUp(new MuxDeadlineError(`close of ${this.remoteAddress}`, timeoutMs)),
      timeoutMs,
    );
    const onAbort = () =>
      giveUp(new MuxAbortError(`close of ${this.remoteAddress}`, signal?.reason));
    if (signal?.aborted === true) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    try {
      // Closing already (an earlier close(), or the peer's goaway): wait for it, bounded.
      if (this.#state === 'open') {
        this.#setState('closing');
        // A channel that gives up its waiting sends still closes; the connection goes on.
        await Promise.allSettled([...this.#channels.values()].map((ch) => ch.close({ timeoutMs })));
        if (this.#pendingWrites > 0 && this.#now() === 'closing') {
          await new Promise<void>((resolve) => {
            this.#writesIdle = resolve;
          });
        }
        this.#flushCredit();
        if (this.#now() === 'closing') {
          if (!this.#peerGoAway) this.#writeFrame(FrameType.GoAway, 0, 0, undefined);
          this.#end();
        }
      }
      await this.#closed();
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    if (late !== undefined) throw late;
  }

  #closed(): Promise<void> {
    if (this.#state === 'closed' || this.#state === 'failed') return Promise.resolve();
    return new Promise<void>((resolve) => this.once('close', () => resolve()));
  }

  #finish(): void {
    if (this.#state === 'closed' || this.#state === 'failed') return;
    this.#teardown();
    for (const ch of this.#channels.values()) ch.finish();
    this.#forgetChannels();
    this.#window.close();
    this.#setState('closed');
    this.emit('close', undefined);
  }

  destroy(error?: Error): void {
    if (this.#state === 'closed' || this.#state === 'failed') return;
    const err = error ?? new MuxClosedError(`connection to ${this.remoteAddress}`);
    this.#error = err;
    this.#teardown();
    this.#window.destroy(err);
    for (const ch of this.#channels.values()) ch.fail(err);
    this.#forgetChannels();
    this.#socket.destroy();
    this.#setState(error === undefined ? 'closed' : 'failed');
    if (error !== undefined && this.listenerCount('error') > 0) this.emit('error', err);
    this.emit('close', error === undefined ? undefined : err);
  }

  /** Terminal: no channel of this connection can carry anything any more. */
  #forgetChannels(): void {
    this.#channels.clear();
    this.#open = 0;
  }

  #teardown(): void {
    clearInterval(this.#heartbeat);
    if (this.#creditTimer !== undefined) clearTimeout(this.#creditTimer);
    this.#creditTimer = undefined;
    this.#reader.reset();
    const b = this.#assembling;
    this.#assembling = undefined;
    if (b !== undefined && !b.released) b.release();
    this.#writesIdle?.();
    this.#writesIdle = undefined;
  }

  /** The state, read afresh after an await (TypeScript keeps an earlier narrowing). */
  #now(): ConnectionState {
    return this.#state;
  }

  #setState(s: ConnectionState): void {
    this.#state = s;
    this.emit('state', s);
  }

  #checkOpen(what: string): void {
    if (this.#state !== 'open')
      throw this.#error ?? new MuxClosedError(`${what} on a ${this.#state} connection`);
  }

  /** TCP has no one-sided reads: callers fall back to a request on a channel. */
  get supportsRead(): boolean {
    return false;
  }

  /** Always throws ERR_MUX_NOT_SUPPORTED (see `supportsRead`). */
  read(_descriptor: ReadDescriptor, _list: ReadList, _options?: WaitOptions): Promise<void> {
    throw new MuxError(
      'ERR_MUX_NOT_SUPPORTED',
      'read: one-sided reads need an RDMA connection (supportsRead is false over TCP)',
    );
  }

  stats(): ConnectionStats {
    return {
      state: this.#state,
      channels: this.#open,
      ...this.#stats,
      sendWindowBytes: this.#window.bytesInFlight,
      receiveHeldBytes: this.#held,
      maxReceiveHeldBytes: this.#maxHeld,
    };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function releaseParts(message: OutboundMessage): void {
  const parts = (Array.isArray(message) ? message : [message]) as readonly MessagePart[];
  for (const p of parts) {
    const b = p instanceof Uint8Array ? undefined : 'block' in p ? p.block : p;
    if (b !== undefined && !b.released) b.release();
  }
}
