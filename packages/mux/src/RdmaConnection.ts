import { EventEmitter } from 'node:events';
import { type Block, BlockSlice, type RegisteredAllocator } from '@rdmajs/allocator';
import {
  FlowctlError,
  ReceiveCredits,
  SendCredits,
  SendWindow,
  type SharedBudget,
} from '@rdmajs/flowctl';
import {
  allocCompletions,
  isRetryableStatus,
  NOTIFY_SOLICITED_ONLY,
  type QueuePair,
  RdmaCompletionError,
  type SendWr,
  type SendWrList,
  type Sge,
  type WorkCompletion,
} from '@rdmajs/verbs';
import type { SendOptions } from './Channel.js';
import type { Connection, ConnectionEvents, ConnectionState } from './Connection.js';
import {
  MuxAbortError,
  MuxClosedError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxProtocolError,
} from './errors.js';
import { FRAME_HEADER_BYTES, MAX_CHANNEL_NAME_BYTES, readU32, writeU32 } from './FrameHeader.js';
import type { HandshakeLimits } from './Handshake.js';
import { type ControlLink, ControlType, LEASE_RETURN_BYTES } from './internal/ControlLink.js';
import { FreeList } from './internal/FreeList.js';
import { OneTimerClock } from './internal/OneTimerClock.js';
import type { PeerResources } from './internal/PeerResources.js';
import { PollEntry, type PollLoop } from './internal/PollLoop.js';
import { POST_LIST_MAX, PostLists } from './internal/PostLists.js';
import { prepareRead } from './internal/prepareRead.js';
import type { PollPolicy } from './internal/RdmaOptions.js';
import { type PoolUser, RECV_WR_ID_LIMIT, type ReceivePool } from './internal/ReceivePool.js';
import {
  decodeRendezvousNotice,
  encodeRendezvousNotice,
  NoticeKind,
  RENDEZVOUS_NOTICE_BYTES,
} from './internal/RendezvousNotice.js';
import {
  decodeWireHeader,
  encodeWireHeader,
  newWireHeader,
  stampWireHeader,
  WIRE_FLAG_CREDIT_STALLED,
  WIRE_HEADER_BYTES,
  WireType,
} from './internal/WireHeader.js';
import {
  copyMessage,
  InboundMessage,
  type MessagePart,
  messageLength,
  type OutboundMessage,
} from './Message.js';
import { type ArrivalSlot, RdmaChannel } from './RdmaChannel.js';
import type { RdmaConnectionStats } from './RdmaStats.js';
import type { ReadDescriptor } from './ReadDescriptor.js';
import { ReadList } from './ReadList.js';
import type { WaitOptions } from './WaitOptions.js';
import { signalOf, timeoutOf } from './WaitOptions.js';

/** Settings of a connection, resolved by the transport and the setup exchange. */
export interface RdmaConnectionSettings {
  /** What this side announced in the handshake (enforced on the peer). */
  local: HandshakeLimits;
  /** What the peer announced (respected by this side). */
  peer: HandshakeLimits;
  maxChannels: number;
  defaultTimeoutMs: number;
  heartbeatIntervalMs: number;
  peerTimeoutMs: number;
  creditFlushMs: number;
  pollPolicy: PollPolicy;
  /** The transport's poll loop ('adaptive' only): polls CQs for spinUs after activity. */
  pollLoop: PollLoop | undefined;
  /** Largest message sent eager, agreed by both sides (the smaller threshold). */
  eagerLimit: number;
  /**
   * The peer's receive credits: its initial lease, reserve and the most it may lease us (its
   * pool's buffers for us), from the setup exchange.
   */
  sendCredits: { initialCredits: number; reservedCredits: number; maxCredits: number };
  /** A sender that used no credit for this long gives its grown lease back (LeaseReturn). */
  leaseIdleMs: number;
  receiveCredits: { initialCredits: number; reservedCredits: number; returnThreshold: number };
  /** Largest RDMA READ work request (bigger messages are read in chunks). */
  readChunkBytes: number;
  budget: SharedBudget | undefined;
  /** This side's cap on the send window (the peer's announced window is only an upper bound). */
  maxSendWindow: { maxBytes: number; maxMessages: number };
  /** A peer must answer Done for an offered block within this, else ERR_MUX_PEER_TIMEOUT. */
  doneTimeoutMs: number;
  /** The peer's transport incarnation (setup): read() takes only its descriptors. */
  peerIncarnation: bigint;
}

/** Every this many sends one is signaled (and always the last of a batch). */
const SIGNAL_EVERY = 16;
/**
 * Retries of receive reposts a post refused for now (ERR_RDMA_BUSY: a peer process holds the
 * SRQ's lock and is stopped): 2 ms, doubling up to 128 ms, 12 in all (about 0.9 s of waits,
 * each try bounded by verbs' lock wait) before the connection fails.
 */
const REPOST_RETRY_FIRST_MS = 2;
const REPOST_RETRY_MAX_MS = 128;
const REPOST_ATTEMPTS = 12;
/**
 * Send wrIds of a lane are RECV_WR_ID_LIMIT + a sequence modulo this (a power of two above
 * any send queue): they stay small integers (V8 Smis, so reaping allocates nothing) however
 * many sends a lane makes, and a completion's id alone says how far its lane's ring retires.
 */
const WR_SEQ_SPAN = 1 << 20;
const WR_SEQ_MASK = WR_SEQ_SPAN - 1;
/** How the CQ is armed now: not (polled, or its event fired), for solicited only, for any. */
const ARM_NONE = 0;
const ARM_SOLICITED = 1;
const ARM_ANY = 2;
const KIND_SEND = 0;
const KIND_READ = 1;
/** A one-sided read() of a ReadList: its WRs are the list's own. */
const KIND_LIST = 2;
/** #enqueue's lane for the read QP. */
const READ_LANE = -1;
/**
 * How long the flush completions of an errored read QP may take (an abandoned read waits
 * for them): soft pushes them within toError(), a NIC within microseconds; past this bound
 * the device is not answering and the connection fails.
 */
const READ_FLUSH_BOUND_MS = 10_000;
/**
 * How often pending reads are checked against their deadlines: a read() rejects for its
 * deadline up to this much after it (reads end in microseconds; the deadline is a bound).
 */
const READ_DEADLINE_TICK_MS = 10;

/** Header-only sends (Open with its name, notices, credits, Close, gathered Data) fit here. */
const SMALL_SLOT_BYTES = WIRE_HEADER_BYTES + 256;
/**
 * Free small send slots and queue records kept while busy (beyond, completed slots give
 * their block back): 1 024 channels in flight hold one each, queued or posted and unreaped,
 * and up to a send queue more per QP whose completions wait in the CQ (a pool of 256 gave ¾
 * of them back and registered them anew every round at x1024).
 */
const SMALL_SLOT_POOL_MAX = 2048;
/** Free large (eager-sized) send slots kept. */
const LARGE_SLOT_POOL_MAX = 256;
/** What an idle connection keeps of its pools (the rest goes back after `leaseIdleMs`). */
const IDLE_POOL_KEEP = 256;
/** Free queue records kept (as SMALL_SLOT_POOL_MAX). */
const ITEM_POOL_MAX = 2048;

/**
 * A registered send buffer with its work request, kept for the connection's life and reused
 * once its SEND completed: no block, view, WR or SGE is allocated per message.
 */
class SendSlot {
  readonly block: Block;
  readonly bytes: Uint8Array;
  readonly small: boolean;
  readonly sge: { addr: number; length: number; lkey: number };
  readonly sgList: Sge[];
  readonly wr: {
    wrId: number;
    opcode: 'SEND';
    sgList: Sge[];
    signaled: boolean;
    solicited: boolean;
  };

  constructor(block: Block, small: boolean) {
    this.block = block;
    this.bytes = block.bytes;
    this.small = small;
    this.sge = { addr: block.addr, length: 0, lkey: block.lkey };
    this.sgList = [this.sge];
    // Every SEND asks the peer to react (data, notices, Open/Close, credit updates it may be
    // waiting for): solicited, so it wakes a peer asleep on a solicited-only arm.
    this.wr = { wrId: 0, opcode: 'SEND', sgList: this.sgList, signaled: false, solicited: true };
  }
}

/** One queued RDMA operation of a QP: a SEND from a send slot, or a rendezvous READ (pooled). */
class OutItem {
  kind = KIND_SEND;
  /** SEND: the header (and, when copied, the payload) in registered memory. */
  slot: SendSlot | undefined;
  sendBytes = 0;
  /** SEND: zero-copy gather of the application's own blocks after the header (`gathered` used). */
  readonly extra: { addr: number; length: number; lkey: number }[] = [];
  gathered = 0;
  /** The send() waiting for this SEND's completion (gathered sends only). */
  resolve: (() => void) | undefined;
  reject: ((err: Error) => void) | undefined;
  readonly executor = (resolve: () => void, reject: (err: Error) => void): void => {
    this.resolve = resolve;
    this.reject = reject;
  };
  read: ReadOp | undefined;
  /**
   * KIND_LIST: the list, the read()'s deadline (performance.now() ms, 0: none; the connection's
   * one read-deadline timer checks it) with its timeoutMs, and its abort signal.
   */
  list: ReadList | undefined;
  deadlineAt = 0;
  timeoutMs = 0;
  signal: AbortSignal | undefined;
  /**
   * KIND_LIST: what a deadline or abort calls (the connection's #abandonRead): the read()
   * rejects with `failure` only once none of its READs can land any more.
   */
  abandon: ((item: OutItem, err: Error) => void) | undefined;
  failure: Error | undefined;
  readonly onAbort = (): void => {
    const err = new MuxAbortError('read', this.signal?.reason);
    if (this.abandon !== undefined) this.abandon(this, err);
    else this.settle(err);
  };
  posted = 0;
  /** Posted, and someone waits for its own completion (a gathered send(), a READ). */
  awaited = false;

  /** Drops the deadline and the abort listener (the promise stays pending). */
  detach(): void {
    this.deadlineAt = 0;
    if (this.signal !== undefined) {
      this.signal.removeEventListener('abort', this.onAbort);
      this.signal = undefined;
    }
  }

  settle(err?: Error): void {
    this.detach();
    const res = this.resolve;
    const rej = this.reject;
    this.resolve = undefined;
    this.reject = undefined;
    if (err === undefined) res?.();
    else rej?.(err);
  }
}

/** send() of a message that needs nothing more from the caller: one shared settled promise. */
const RESOLVED: Promise<void> = Promise.resolve();

interface ReadOp {
  token: number;
  remoteAddr: number;
  rkey: number;
  length: number;
  dst: Block;
  ch: RdmaChannel;
  slot: ArrivalSlot;
  seq: number;
  charge: number;
}

/** A QP of the pool with its software queue and its send-queue accounting. */
interface Lane {
  qp: QueuePair;
  index: number;
  /** Queued items are fifo[head … tail): the array is never shrunk (no reallocation). */
  fifo: (OutItem | undefined)[];
  head: number;
  tail: number;
  /**
   * Posted WRs, oldest at ringHead: a circular buffer of `max` entries (sqUsed of them live);
   * the newest has sequence nextSeq − 1 (wrId RECV_WR_ID_LIMIT + sequence, see WR_SEQ_SPAN).
   */
  ringItems: (OutItem | undefined)[];
  ringHead: number;
  sqUsed: number;
  max: number;
  unsignaled: number;
  nextSeq: number;
  creditStalled: boolean;
}

/** A rendezvous source waiting for the peer's Done. */
interface Source {
  block: Block;
  /** This connection copied the message into it (else it is the application's block). */
  own: boolean;
  settle: ((err?: Error) => void) | undefined;
  /** When the Ready went out (performance.now(), monotonic): the Done deadline counts from it. */
  since: number;
}

/**
 * One RDMA peer after the handshake and setup: channels multiplexed on a small pool of RC
 * QPs; eager messages by SEND into the peer's SRQ buffers (credits per flowctl, piggybacked
 * in every header or sent as an update), larger ones by rendezvous (the receiver READs the
 * sender's registered block, then says Done); a SendWindow bounds what the peer holds
 * unreleased (its announced receive window, returned as its application releases). The
 * control TCP connection stays open for heartbeats and the graceful end; its loss fails the
 * connection.
 */
export class RdmaConnection extends EventEmitter<ConnectionEvents> implements Connection, PoolUser {
  readonly role: 'client' | 'server';
  readonly remoteAddress: string;
  readonly defaultTimeoutMs: number;
  readonly #link: ControlLink;
  readonly #s: RdmaConnectionSettings;
  readonly #res: PeerResources;
  readonly #pool: ReceivePool;
  readonly #alloc: RegisteredAllocator;
  readonly #window: SendWindow;
  readonly #sendCredits: SendCredits;
  readonly #recvCredits: ReceiveCredits;
  readonly #creditClock: OneTimerClock;
  /** ReceiveCredits says an update is due (threshold reached or its flush delay passed). */
  readonly #onCreditsDue = (): void => {
    if (!this.#draining && !this.#terminal()) this.#maybeCreditUpdate();
  };
  readonly #lanes: Lane[] = [];
  readonly #laneByQpn = new Map<number, Lane>();
  /** The QP of one-sided reads (the pool's last): its failure costs the reads, not the channels. */
  #readLane!: Lane;
  /** Why reads fail from now on (the read QP is in error), once it is. */
  #readFailed: Error | undefined;
  /**
   * A read was abandoned (deadline, abort): the read QP was moved to error and its posted
   * READs are flushing; reads settle once the last flush completion is reaped (or the
   * connection fails when that takes longer than READ_FLUSH_BOUND_MS).
   */
  #readFlushTimer: NodeJS.Timeout | undefined;
  /** Read deadlines: one timer, restarted (not made anew) while reads wait past their post. */
  readonly #readClock = new OneTimerClock(READ_DEADLINE_TICK_MS);
  #readSweepArmed = false;
  readonly #expired: OutItem[] = [];
  /** A retired read WR completed in error (flushed): the list's read() rejects with this. */
  #retireErr: Error | undefined;
  readonly #channels = new Map<number, RdmaChannel>();
  readonly #sources = new Map<number, Source>();
  readonly #reads = new Set<ReadOp>();
  readonly #wcs: WorkCompletion[] = allocCompletions(64);
  readonly #hdr = newWireHeader();
  readonly #batch: SendWr[] = [];
  readonly #lists = new PostLists<SendWr>();
  readonly #smallSlots = new FreeList<SendSlot>(SMALL_SLOT_POOL_MAX);
  readonly #largeSlots = new FreeList<SendSlot>(LARGE_SLOT_POOL_MAX);
  readonly #items = new FreeList<OutItem>(ITEM_POOL_MAX);
  /**
   * A send waited for a credit since the last message: the next header says so, and the peer
   * grows this side's lease (its credit estimate cannot see a sender whose credits are all in
   * flight).
   */
  #creditStalled = false;
  /** Credits this side had consumed at the last heartbeat tick, and since when it used none. */
  #consumedAtTick = 0;
  #idleSince = 0;
  /** Frames received at the last heartbeat tick: unchanged, the peer sent nothing since. */
  #framesInAtTick = 0;
  #open = 0;
  #nextId: number;
  #nextToken = 1;
  #state: ConnectionState = 'open';
  #error: Error | undefined;
  /** Queued or posted operations not yet complete (close waits for them). */
  #inFlight = 0;
  #idle: (() => void) | undefined;
  /** Posted items whose own completion someone waits for (they need a wake-up of their own). */
  #awaited = 0;
  /** How the CQ's event is armed (ARM_*): its own completions wake this side only at ARM_ANY. */
  #armed = ARM_NONE;
  #flushScheduled = false;
  /**
   * The last drain delivered several messages: the sends their handlers make in this tick go
   * out as one batch (one post, one wake-up of the peer), not the first alone and the rest
   * after it. Cleared by the flush.
   */
  #batchTick = false;
  #draining = false;
  /** A drain stopped early and goes on from setImmediate (not armed meanwhile). */
  #resumeScheduled = false;
  /**
   * The last drain delivered several messages: their releases (in this tick's microtasks,
   * and after the flush) repost in one batch too.
   */
  #burst = false;
  /**
   * Receive buffers released and not yet reposted: #reposts[0 … #repostCount). Those a post
   * refused for now (a peer process holding the SRQ's lock) stay here, their credits not
   * owed, and go again from #repostTimer.
   */
  readonly #reposts: number[];
  #repostCount = 0;
  /** Retries since reposts were last refused (the timer's backoff and bound). */
  #repostAttempts = 0;
  #repostTimer: NodeJS.Timeout | undefined;
  /** Parts a SEND gathers after its header. */
  readonly #maxGather: number;
  /** This connection's place in the transport's poll loop ('adaptive'). */
  readonly #poll: PollEntry;
  // Receive window (what the peer sent that the application has not released).
  #peerBytes = 0;
  #peerMessages = 0;
  #held = 0;
  #maxHeld = 0;
  #creditBytes = 0;
  #creditMessages = 0;
  #heartbeat: NodeJS.Timeout;
  #peerGoAway = false;
  /**
   * This side sent its goaway (or ended the link after the peer's): it posts nothing more, so
   * the peer, once it drained its CQ, has everything of ours; credits owed from now on stay.
   */
  #quiet = false;
  readonly #stats = {
    messagesSent: 0,
    bytesSent: 0,
    messagesReceived: 0,
    bytesReceived: 0,
    sendStalls: 0,
    framesOut: 0,
    framesIn: 0,
    eagerSent: 0,
    rendezvousSent: 0,
    eagerReceived: 0,
    rendezvousReceived: 0,
    creditStalls: 0,
    creditUpdates: 0,
    receiveCopies: 0,
    rnrCount: 0,
    posts: 0,
    repostRetries: 0,
    reads: 0,
    readItems: 0,
    readQpFailures: 0,
  };

  /** @internal made by RdmaTransport once both sides' QPs are connected. */
  constructor(
    link: ControlLink,
    role: 'client' | 'server',
    settings: RdmaConnectionSettings,
    resources: PeerResources,
  ) {
    super();
    this.#link = link;
    this.role = role;
    this.#s = settings;
    this.#res = resources;
    // Sized for every buffer the connection can hold (its largest lease): a burst larger than
    // any before would otherwise grow the array, an allocation in the middle of traffic.
    this.#reposts = new Array<number>(resources.maxLease).fill(0);
    this.#pool = resources.pool;
    this.#alloc = resources.allocator;
    this.defaultTimeoutMs = settings.defaultTimeoutMs;
    this.remoteAddress = link.remoteAddress;
    this.#nextId = role === 'client' ? 1 : 2;
    this.#poll = new PollEntry({
      pending: () => (this.#terminal() ? 0 : this.#res.cq.pending()),
      drain: () => this.#drain(true),
      sleep: () => {
        if (!this.#terminal()) this.#arm();
      },
    });
    // One peer must not hold the transport's shared budget with a huge announced window.
    this.#window = new SendWindow({
      maxBytes: Math.min(settings.peer.windowBytes, settings.maxSendWindow.maxBytes),
      maxMessages: Math.min(settings.peer.windowMessages, settings.maxSendWindow.maxMessages),
      defaultTimeoutMs: settings.defaultTimeoutMs,
      maxQueued: 1 << 20,
      ...(settings.budget === undefined ? {} : { budget: settings.budget }),
    });
    this.#sendCredits = new SendCredits({
      initialCredits: settings.sendCredits.initialCredits,
      reservedCredits: settings.sendCredits.reservedCredits,
      // A peer whose announced maximum is below its initial lease grants a fixed lease.
      maxCredits: Math.max(settings.sendCredits.initialCredits, settings.sendCredits.maxCredits),
    });
    // The flush delay returns credits the threshold would strand (a receiver holding its
    // buffers, a stalled peer); its timer is restarted, not re-created, per message.
    this.#creditClock = new OneTimerClock(settings.creditFlushMs);
    this.#recvCredits = new ReceiveCredits({
      ...settings.receiveCredits,
      flushDelayMs: settings.creditFlushMs,
      clock: this.#creditClock,
      onUpdateNeeded: this.#onCreditsDue,
    });
    // The last QP carries one-sided reads only (see read()); the others, the channels.
    for (const [index, qp] of resources.qps.entries()) {
      const lane: Lane = {
        qp,
        index,
        fifo: [],
        head: 0,
        tail: 0,
        ringItems: new Array<OutItem | undefined>(qp.caps.maxSendWr).fill(undefined),
        ringHead: 0,
        sqUsed: 0,
        max: qp.caps.maxSendWr,
        unsignaled: 0,
        nextSeq: 0,
        creditStalled: false,
      };
      if (index < resources.qps.length - 1) this.#lanes.push(lane);
      else this.#readLane = lane;
      this.#laneByQpn.set(qp.qpn, lane);
    }
    this.#maxGather = (this.#lanes[0] as Lane).qp.caps.maxSendSge - 1;
    // Receives of this peer's CQ are this connection's; released buffers are told here.
    resources.user = this;
    this.#idleSince = performance.now();
    this.#heartbeat = setInterval(
      () => this.#tick(),
      Math.max(10, settings.heartbeatIntervalMs / 2),
    );
    this.#heartbeat.unref();
    link.setHandlers({
      message: (type, payload) => this.#onControl(type, payload),
      closed: (cause) => this.#onLinkClosed(cause),
      // Ended without a goaway while open: the peer went away (its close would say goaway).
      ended: () => {
        if (this.#state === 'open' && !this.#peerGoAway) this.#onLinkClosed(undefined);
      },
    });
    resources.cq.on('completion', this.#onCq);
    // After the caller's continuation, so its 'channel' listener sees the first messages.
    setImmediate(() => this.#drain());
  }

  get state(): ConnectionState {
    return this.#state;
  }

  get error(): Error | undefined {
    return this.#error;
  }

  get channelCount(): number {
    return this.#open;
  }

  /**
   * Registered memory for this peer only (a pool of `transport.allocator`, closed with the
   * connection): build a message here and it goes out without a copy, a `remote-read` block
   * by rendezvous READ in place, with a key that reaches this pool and nothing else.
   */
  get allocator(): RegisteredAllocator {
    return this.#res.rendezvous;
  }

  openChannel(name = ''): RdmaChannel {
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
    if (this.#open >= this.#s.maxChannels) {
      throw new MuxError('ERR_MUX_INVALID_ARG', `more than ${this.#s.maxChannels} channels`);
    }
    const id = this.#nextId;
    if (id > 0xffffffff) throw new MuxError('ERR_MUX_INVALID_ARG', 'channel ids exhausted');
    this.#nextId += 2;
    const ch = new RdmaChannel(this, id, name, this.#laneOf(id));
    this.#channels.set(id, ch);
    this.#open++;
    const item = this.#sendItem(WIRE_HEADER_BYTES + nameBytes.length);
    const b = (item.slot as SendSlot).bytes;
    encodeWireHeader(b, WireType.Open, id, 0, nameBytes.length);
    b.set(nameBytes, WIRE_HEADER_BYTES);
    this.#enqueue(ch.lane, item);
    return ch;
  }

  /**
   * One-sided reads work on RDMA connections (see `read`) until the read QP fails (a READ
   * the peer refused, a read abandoned at its deadline or abort): false from then on, with
   * the 'readsFailed' event and `stats().readQpFailures` saying so. A new connection reads again.
   */
  get supportsRead(): boolean {
    return this.#readFailed === undefined;
  }

  /**
   * Copies every entry of `list` from the peer's read region (`descriptor`) into this side's
   * memory with RDMA READs, without the peer's CPU. Everything is checked before anything is
   * posted (synchronous throws: ERR_MUX_STALE_DESCRIPTOR for a descriptor of another
   * incarnation or peer, ERR_MUX_READ_RANGE for a range outside the region or a destination
   * not live in this connection's registered memory, ERR_MUX_INVALID_ARG, ERR_MUX_CLOSED);
   * the connection stays usable after any of them.
   *
   * The list's WRs go on the connection's read QP (one more RC QP beside the channels'),
   * chained in one postSend (more only past 64 WRs or when its send queue is full: the rest
   * follow as completions free it), one signaled WR at the end. RC executes the READs of one
   * QP in posting order (rxe, NICs and soft alike; a NIC keeps at most max_rd_atomic in
   * flight and queues the rest), so the entries land in list order: a seqlock "meta, row,
   * meta" list reads meta last. Reads never wait behind channel traffic, nor it behind them.
   *
   * Resolves once all have landed; rejects with ERR_MUX_DEADLINE after `timeoutMs` or
   * ERR_MUX_ABORTED only once nothing of it can land any more: the read QP is moved to error
   * and the rejection waits for its flush completions (bounded: past that the connection
   * fails), so the caller may reuse the destinations at once; reads on this connection then
   * fail as after a refused READ — and so do the peer's reads of our regions, which that
   * QP pair also carries (once the peer's next READ exhausts its transport retries: see the
   * README's "Deadline"). Or it rejects with the connection's error. A READ the peer refuses (its region was
   * closed: REM_ACCESS_ERR) puts the read QP in error: that read and every later one reject
   * with ERR_MUX_READ_FAILED (retryable: a new connection reads again); channels go on.
   */
  read(descriptor: ReadDescriptor, list: ReadList, options?: WaitOptions): Promise<void> {
    this.#checkOpen('read');
    if (!(list instanceof ReadList))
      throw new MuxError('ERR_MUX_INVALID_ARG', 'read: list must be a ReadList');
    const timeoutMs = timeoutOf(options, this.defaultTimeoutMs);
    const signal = signalOf(options);
    if (this.#readFailed !== undefined) throw this.#readFailed;
    prepareRead(descriptor, list, this.#s.peerIncarnation, this.#ours);
    if (signal?.aborted === true) throw new MuxAbortError('read', signal.reason);
    if (list.length === 0) return RESOLVED;
    const item = this.#items.take() ?? new OutItem();
    item.kind = KIND_LIST;
    item.list = list;
    item.abandon = this.#abandonRead;
    list.busy = true;
    this.#stats.reads++;
    this.#stats.readItems += list.length;
    const done = new Promise<void>(item.executor);
    this.#enqueue(READ_LANE, item);
    // Soft completes a READ within its post: reaped now, not after a wake-up.
    if (!this.#draining && item.resolve !== undefined && this.#res.cq.pending() > 0)
      this.#drain(true);
    // Still pending (and not recycled by a read() a handler made during that drain).
    if (item.list === list && item.resolve !== undefined && item.deadlineAt === 0) {
      item.deadlineAt = performance.now() + timeoutMs; // monotonic: wall-clock steps do not move it
      item.timeoutMs = timeoutMs;
      this.#armReadSweep();
      if (signal !== undefined) {
        item.signal = signal;
        signal.addEventListener('abort', item.onAbort, { once: true });
      }
    }
    return done;
  }

  readonly #ours = (block: Block): boolean =>
    this.#alloc.owns(block) || this.#res.rendezvous.owns(block);

  /**
   * A read()'s deadline passed or its signal aborted while its READs may still be posted:
   * rejecting now would let them land later, in a destination the caller already reuses
   * (e.g. for a fallback). So the read QP goes to error (RC then executes nothing more of
   * it) and the read rejects with `err` once the flush completion of every READ posted on it
   * was reaped: after that nothing lands. Reads then fail as after a refused READ.
   */
  readonly #abandonRead = (item: OutItem, err: Error): void => {
    if (item.list === undefined || item.reject === undefined || item.failure !== undefined) return; // settled already (or abandoned once)
    item.detach();
    item.failure = err;
    if (this.#terminal()) return; // the teardown settles it, the QPs closed
    if (this.#readFailed === undefined) {
      this.#readsFailed(
        readFailure(
          `a read was abandoned (${(err as MuxError).code}): its READs were cancelled by moving the read QP to error`,
          err,
        ),
      );
      try {
        this.#readLane.qp.toError();
      } catch (cause) {
        this.destroy(
          new MuxConnectionError(
            'ERR_MUX_CONNECTION_LOST',
            'the read QP could not be moved to error',
            cause,
          ),
        );
        return;
      }
      // Waited for like a READ: the flush completions must wake this side.
      this.#awaited++;
      this.#readFlushTimer = setTimeout(this.#readFlushOverdue, READ_FLUSH_BOUND_MS);
      if (this.#readLane.sqUsed === 0) {
        this.#readFlushed();
        return;
      }
      if (this.#armed === ARM_SOLICITED) this.#arm();
      if (!this.#resumeScheduled) {
        this.#resumeScheduled = true;
        setImmediate(this.#resume);
      }
    } else if (this.#readFlushTimer === undefined) {
      // Flushed already (a READ the peer refused): nothing of it is posted any more.
      item.settle(err);
    }
  };

  /**
   * From now on reads fail with `err` (the read QP is in error): counted, and told to the
   * application (a microtask later: this runs inside completion handling).
   */
  #readsFailed(err: Error): void {
    this.#readFailed = err;
    this.#stats.readQpFailures++;
    queueMicrotask(() => {
      if (!this.#terminal()) this.emit('readsFailed', err);
    });
  }

  /** The read-deadline timer runs (one per connection, no timer per read). */
  #armReadSweep(): void {
    if (this.#readSweepArmed) return;
    this.#readSweepArmed = true;
    this.#readClock.setTimer(this.#sweepReads, READ_DEADLINE_TICK_MS);
  }

  /** Every READ_DEADLINE_TICK_MS while reads wait: those past their deadline are abandoned. */
  readonly #sweepReads = (): void => {
    this.#readSweepArmed = false;
    if (this.#terminal()) return;
    const now = performance.now();
    const lane = this.#readLane;
    const expired = this.#expired;
    let waiting = false;
    // Queued (or partly posted) lists, then posted ones (in the ring at their last WR).
    for (let k = lane.head; k < lane.tail; k++)
      waiting = this.#checkDeadline(lane.fifo[k], now) || waiting;
    for (let k = 0; k < lane.sqUsed; k++)
      waiting = this.#checkDeadline(lane.ringItems[(lane.ringHead + k) % lane.max], now) || waiting;
    for (const it of expired) this.#abandonRead(it, new MuxDeadlineError('read', it.timeoutMs));
    expired.length = 0;
    if (waiting && !this.#terminal()) this.#armReadSweep();
  };

  /** A pending read past its deadline goes to #expired; true when one still waits for it. */
  #checkDeadline(it: OutItem | undefined, now: number): boolean {
    if (it === undefined || it.kind !== KIND_LIST || it.deadlineAt === 0) return false;
    if (now < it.deadlineAt) return true;
    this.#expired.push(it);
    return false;
  }

  /** Every READ posted on the errored read QP completed (flushed): settle what is left. */
  #readFlushed(): void {
    clearTimeout(this.#readFlushTimer);
    this.#readFlushTimer = undefined;
    this.#awaited--;
    const failed = this.#readFailed as Error;
    for (const it of emptyLane(this.#readLane)) {
      if (it.awaited) this.#awaited--;
      it.settle(it.failure ?? failed);
      this.#putItem(it);
      this.#inFlight--;
    }
    this.#checkIdle();
  }

  readonly #readFlushOverdue = (): void => {
    this.#readFlushTimer = undefined;
    this.destroy(
      new MuxConnectionError(
        'ERR_MUX_CONNECTION_LOST',
        `the read QP's flush completions did not arrive within ${READ_FLUSH_BOUND_MS} ms`,
      ),
    );
  };

  /**
   * The read QP is in error (a READ the peer refused, or its own QP failed when the peer's
   * READ was refused): every read queued or posted on it rejects with `err`, and so does
   * every later read(); the channels are not affected. A new connection reads again.
   */
  #failReads(err: Error): void {
    if (this.#readFailed !== undefined) return;
    this.#readsFailed(err);
    // RC executes nothing on a QP in error: the lists' destinations are not written again.
    for (const it of emptyLane(this.#readLane)) {
      if (it.awaited) this.#awaited--;
      it.settle(err);
      this.#putItem(it);
      this.#inFlight--;
    }
    this.#checkIdle();
  }

  /** Channels map to QPs by id, both sides alike; odd and even ids spread over the pool. */
  #laneOf(id: number): number {
    return (id >>> 1) % this.#lanes.length;
  }

  // ---- send path ----

  /**
   * The send path of every channel. Not async: a send that gets window space at once and
   * copies its bytes returns one shared settled promise (nothing allocated per message).
   */
  sendOn(ch: RdmaChannel, message: OutboundMessage, options?: SendOptions): Promise<void> {
    const transfer = options?.transfer === true;
    let length = 0;
    let charge = 0;
    let timeoutMs = 0;
    let signal: AbortSignal | undefined;
    try {
      if (!ch.sendable) throw this.#error ?? new MuxClosedError(`channel ${ch.id}`);
      this.#checkOpen('send');
      length = messageLength(message);
      if (length > this.#s.peer.maxFrameBytes) {
        throw new MuxError(
          'ERR_MUX_TOO_LARGE',
          `message of ${length} bytes; the peer accepts at most ${this.#s.peer.maxFrameBytes}`,
        );
      }
      charge = length + FRAME_HEADER_BYTES;
      timeoutMs = timeoutOf(options, this.defaultTimeoutMs);
      signal = signalOf(options);
      let got: boolean;
      try {
        got = this.#window.tryAcquire(charge);
      } catch (err) {
        throw this.#mapFlowctl(err, timeoutMs);
      }
      if (got) {
        const done = this.#dispatch(ch, message, length, charge);
        if (done === undefined) {
          if (transfer) releaseParts(message);
          return RESOLVED;
        }
        return transfer ? done.finally(() => releaseParts(message)) : done;
      }
    } catch (err) {
      if (transfer) releaseParts(message);
      return Promise.reject(err);
    }
    return this.#sendAfterWait(ch, message, length, charge, timeoutMs, signal, transfer);
  }

  /** Queues a message that holds its window space; undefined when the caller's parts are free. */
  #dispatch(
    ch: RdmaChannel,
    message: OutboundMessage,
    length: number,
    charge: number,
  ): Promise<void> | undefined {
    let done: Promise<void> | undefined;
    try {
      done =
        length <= this.#s.eagerLimit
          ? this.#sendEager(ch, message, length)
          : this.#sendRendezvous(ch, message, length);
    } catch (err) {
      // Nothing was queued: the window space comes back here.
      this.#window.release(charge);
      throw err;
    }
    ch.messagesSent++;
    ch.bytesSent += length;
    this.#stats.messagesSent++;
    this.#stats.bytesSent += length;
    return done;
  }

  /** A send that found the window full: waits (bounded) for space, then goes. */
  async #sendAfterWait(
    ch: RdmaChannel,
    message: OutboundMessage,
    length: number,
    charge: number,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    transfer: boolean,
  ): Promise<void> {
    try {
      ch.pendingSends++;
      let counted = true;
      try {
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
          if (giveUp.aborted && signal?.aborted !== true)
            throw new MuxClosedError(`channel ${ch.id}`, giveUp.reason);
          throw err;
        }
        const st = this.#state;
        if (st === 'failed' || st === 'closed' || ch.state === 'failed' || ch.state === 'closed') {
          this.#window.release(charge);
          throw this.#error ?? new MuxClosedError(`channel ${ch.id}`);
        }
        const done = this.#dispatch(ch, message, length, charge);
        counted = false;
        ch.sendDone();
        if (done !== undefined) await done;
      } catch (err) {
        if (counted) ch.sendDone();
        throw err;
      }
    } finally {
      if (transfer) releaseParts(message);
    }
  }

  /**
   * True when every part (at most `maxParts`) is a block of the transport allocator or of
   * this peer's pool: gathered, not copied (a SEND needs the local key only).
   */
  #gatherable(message: OutboundMessage, maxParts: number): boolean {
    if (!Array.isArray(message)) return this.#ownBlock(message as MessagePart);
    const parts = message as readonly MessagePart[];
    if (parts.length > maxParts) return false;
    for (const p of parts) if (!this.#ownBlock(p)) return false;
    return true;
  }

  #ownBlock(p: MessagePart): boolean {
    if (p instanceof Uint8Array) return false;
    const b = p instanceof BlockSlice ? p.block : p;
    return this.#alloc.owns(b) || this.#res.rendezvous.owns(b);
  }

  /** Queues an eager SEND; returns a promise when the caller's blocks are used in place. */
  #sendEager(ch: RdmaChannel, message: OutboundMessage, length: number): Promise<void> | undefined {
    const seq = ch.sendSeq;
    const gather = length > 0 && this.#gatherable(message, this.#maxGather);
    let item: OutItem;
    let done: Promise<void> | undefined;
    if (gather) {
      item = this.#sendItem(WIRE_HEADER_BYTES);
      if (Array.isArray(message)) {
        for (const p of message as readonly (Block | BlockSlice)[]) this.#gather(item, p);
      } else {
        this.#gather(item, message as Block | BlockSlice);
      }
      done = new Promise<void>(item.executor);
    } else {
      item = this.#sendItem(WIRE_HEADER_BYTES + length);
      // The one copy: plain bytes into registered memory.
      copyMessage(message, (item.slot as SendSlot).bytes, WIRE_HEADER_BYTES);
    }
    encodeWireHeader((item.slot as SendSlot).bytes, WireType.Data, ch.id, seq, length);
    ch.sendSeq = (seq + 1) >>> 0;
    this.#stats.eagerSent++;
    this.#enqueue(ch.lane, item);
    return done;
  }

  /** Notes where a part lies (checked live now), for the SEND's gather list. */
  #gather(item: OutItem, p: Block | BlockSlice): void {
    if (p.length === 0) return;
    let e = item.extra[item.gathered];
    if (e === undefined) {
      e = { addr: 0, length: 0, lkey: 0 };
      item.extra.push(e);
    }
    e.addr = p.addr;
    e.length = p.length;
    e.lkey = p.lkey;
    item.gathered++;
  }

  /**
   * Offers a registered block for the peer to READ: in place when it is a `remote-read`
   * block of this peer's pool, else copied once into that pool (a block of the shared
   * transport allocator too: its arena's key would reach other peers' memory).
   */
  #sendRendezvous(
    ch: RdmaChannel,
    message: OutboundMessage,
    length: number,
  ): Promise<void> | undefined {
    const part = this.#gatherable(message, 1)
      ? ((Array.isArray(message) ? message[0] : message) as Block | BlockSlice)
      : undefined;
    let src: Block;
    let addr: number;
    let rkey: number;
    let own: boolean;
    if (part !== undefined && readable(part, this.#res.rendezvous)) {
      src = part instanceof BlockSlice ? part.block : part;
      addr = part.addr;
      rkey = part.rkey;
      own = false;
    } else {
      src = this.#res.rendezvous.alloc(length, 'remote-read');
      copyMessage(message, src.bytes, 0);
      addr = src.addr;
      rkey = src.rkey;
      own = true;
    }
    let token = this.#nextToken;
    while (this.#sources.has(token) || token === 0) token = (token + 1) >>> 0;
    this.#nextToken = (token + 1) >>> 0;
    const source: Source = { block: src, own, settle: undefined, since: performance.now() };
    let done: Promise<void> | undefined;
    if (!own) {
      done = new Promise<void>((resolve, reject) => {
        source.settle = (err) => (err === undefined ? resolve() : reject(err));
      });
    }
    const item = this.#sendItem(WIRE_HEADER_BYTES + RENDEZVOUS_NOTICE_BYTES);
    const b = (item.slot as SendSlot).bytes;
    encodeWireHeader(b, WireType.Ready, ch.id, ch.sendSeq, length);
    encodeRendezvousNotice(b, WIRE_HEADER_BYTES, {
      kind: NoticeKind.Ready,
      token,
      addr: BigInt(addr),
      length,
      rkey,
    });
    ch.sendSeq = (ch.sendSeq + 1) >>> 0;
    this.#sources.set(token, source);
    this.#stats.rendezvousSent++;
    this.#enqueue(ch.lane, item);
    return done;
  }

  /** A queue record with a send slot of at least `bytes` (both reused once completed). */
  #sendItem(bytes: number): OutItem {
    const item = this.#items.take() ?? new OutItem();
    item.slot = this.#takeSlot(bytes);
    item.sendBytes = bytes;
    return item;
  }

  #takeSlot(bytes: number): SendSlot {
    if (bytes <= SMALL_SLOT_BYTES) {
      return this.#smallSlots.take() ?? new SendSlot(this.#alloc.alloc(SMALL_SLOT_BYTES), true);
    }
    const large = WIRE_HEADER_BYTES + Math.max(this.#s.eagerLimit, 256);
    if (bytes > large) throw new MuxError('ERR_MUX_TOO_LARGE', `a SEND of ${bytes} bytes`);
    return this.#largeSlots.take() ?? new SendSlot(this.#alloc.alloc(large), false);
  }

  /** A completed (or never posted) send slot goes back to its pool. */
  #putSlot(slot: SendSlot): void {
    const pool = slot.small ? this.#smallSlots : this.#largeSlots;
    if (this.#terminal() || !pool.put(slot)) quietly(slot.block);
  }

  /** A finished queue record goes back to the pool (its slot already returned). */
  #putItem(item: OutItem): void {
    item.kind = KIND_SEND;
    item.slot = undefined;
    item.sendBytes = 0;
    item.gathered = 0;
    item.resolve = undefined;
    item.reject = undefined;
    item.read = undefined;
    if (item.list !== undefined) item.list.busy = false;
    item.list = undefined;
    item.abandon = undefined;
    item.failure = undefined;
    item.posted = 0;
    item.awaited = false;
    this.#items.put(item);
  }

  /**
   * Records a WR about to be posted in the lane's ring (sqUsed < max, checked by the caller)
   * and returns its wrId: above every receive buffer's id, so a completion's wrId alone says
   * which it is.
   */
  #ringPush(lane: Lane, item: OutItem | undefined): number {
    lane.ringItems[(lane.ringHead + lane.sqUsed) % lane.max] = item;
    lane.sqUsed++;
    const seq = lane.nextSeq;
    lane.nextSeq = (seq + 1) & WR_SEQ_MASK;
    return RECV_WR_ID_LIMIT + seq;
  }

  /**
   * Takes `k` ≥ 1 ring places for a run of WRs posted together; only the last carries `item`
   * (the others' places are empty already: #retire empties every place it passes). Returns
   * the run's first sequence number.
   */
  #ringPushRun(lane: Lane, k: number, item: OutItem | undefined): number {
    lane.ringItems[(lane.ringHead + lane.sqUsed + k - 1) % lane.max] = item;
    lane.sqUsed += k;
    const seq = lane.nextSeq;
    lane.nextSeq = (seq + k) & WR_SEQ_MASK;
    return seq;
  }

  #enqueue(lane: number, item: OutItem): void {
    if (this.#quiet || this.#terminal()) {
      // After our goaway nothing goes to the peer (teardown frees what is never posted).
      if (item.slot !== undefined) this.#putSlot(item.slot);
      item.settle(this.#error ?? new MuxClosedError(`connection to ${this.remoteAddress}`));
      this.#putItem(item);
      return;
    }
    this.#inFlight++;
    const l = lane < 0 ? this.#readLane : (this.#lanes[lane] as Lane);
    l.fifo[l.tail++] = item;
    this.#stats.framesOut++;
    // An idle lane posts at once (a reply in a ping-pong needs no microtask: Node's
    // queueMicrotask allocates); a busy one batches what this tick queues.
    if (
      l.sqUsed === 0 &&
      l.tail - l.head === 1 &&
      !this.#draining &&
      !this.#batchTick &&
      !this.#terminal()
    ) {
      this.#flush(l);
      if (l.head === l.tail) return;
    }
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      queueMicrotask(this.#flushTask);
    }
  }

  readonly #flushTask = (): void => {
    this.#flushScheduled = false;
    this.#batchTick = false;
    this.#flushAll();
  };

  #flushAll(): void {
    // Refused reposts wait for their timer: each try may wait out a peer's lock.
    if (this.#repostCount > 0 && this.#repostTimer === undefined) this.#repostReleased();
    if (this.#terminal()) return;
    for (const lane of this.#lanes) this.#flush(lane);
    if (this.#readFailed === undefined) this.#flush(this.#readLane);
    this.#maybeCreditUpdate();
  }

  /** Posts what the lane's queue holds, in order, as far as credits and send slots allow. */
  #flush(lane: Lane): void {
    const batch = this.#batch;
    let n = 0;
    while (lane.head < lane.tail && lane.sqUsed < lane.max) {
      const item = lane.fifo[lane.head] as OutItem;
      if (item.kind === KIND_SEND) {
        if (!this.#sendCredits.tryConsume()) {
          this.#creditStalled = true;
          if (!lane.creditStalled) {
            lane.creditStalled = true;
            this.#stats.creditStalls++;
          }
          break;
        }
        lane.creditStalled = false;
        batch[n++] = this.#stamp(lane, item);
        lane.fifo[lane.head++] = undefined;
      } else if (item.kind === KIND_LIST) {
        // The list's own pre-encoded READs, posted as they are (one crossing per run, no WR
        // objects), after what the batch holds (order within the lane). Each run's last is
        // signaled (its completion retires the run); the list's last completes the read().
        if (n > 0) {
          const ok = this.#post(lane, n);
          n = 0;
          if (!ok) return;
        }
        const list = item.list as ReadList;
        const from = item.posted;
        const k = Math.min(list.length - from, lane.max - lane.sqUsed);
        const wrs = list.wrs;
        const end = from + k;
        const whole = end === list.length;
        if (whole) this.#await(item);
        const seq = this.#ringPushRun(lane, k, whole ? item : undefined);
        for (let j = from; j < end; j++)
          wrs.setWrId(j, RECV_WR_ID_LIMIT + ((seq + j - from) & WR_SEQ_MASK));
        item.posted = end;
        wrs.setSignaled(end - 1, true);
        const ok = this.#postNow(lane, k, wrs, from);
        wrs.setSignaled(end - 1, false); // at rest every record is unsignaled
        if (!ok) return;
        if (!whole) break;
        lane.fifo[lane.head++] = undefined;
      } else {
        const op = item.read as ReadOp;
        while (item.posted < op.length && lane.sqUsed < lane.max) {
          const chunk = Math.min(this.#s.readChunkBytes, op.length - item.posted);
          const last = item.posted + chunk === op.length;
          if (last) this.#await(item);
          const wrId = this.#ringPush(lane, last ? item : undefined);
          batch[n++] = {
            wrId,
            opcode: 'RDMA_READ',
            sgList: [op.dst.sge(item.posted, chunk)],
            remoteAddr: op.remoteAddr + item.posted,
            rkey: op.rkey,
            signaled: last,
          };
          item.posted += chunk;
        }
        if (item.posted < op.length) break;
        lane.fifo[lane.head++] = undefined;
      }
    }
    if (lane.head === lane.tail) {
      lane.head = 0;
      lane.tail = 0;
    } else if (lane.head > 1024 && lane.head * 2 > lane.tail) {
      lane.fifo.copyWithin(0, lane.head, lane.tail);
      lane.fifo.fill(undefined, lane.tail - lane.head, lane.tail);
      lane.tail -= lane.head;
      lane.head = 0;
    }
    this.#post(lane, n);
  }

  /** Credits and window returns go in at post time: whatever is owed rides along. */
  #stamp(lane: Lane, item: OutItem): SendWr {
    const slot = item.slot as SendSlot;
    const credits = this.#recvCredits.takePiggyback();
    stampWireHeader(slot.bytes, credits, this.#creditMessages, this.#creditBytes, this.#flags());
    this.#creditMessages = 0;
    this.#creditBytes = 0;
    slot.sge.length = item.sendBytes;
    const list = slot.sgList;
    if (list.length !== 1) list.length = 1;
    for (let i = 0; i < item.gathered; i++) list.push(item.extra[i] as Sge);
    const wr = slot.wr;
    wr.wrId = this.#ringPush(lane, item);
    // A gathered send() resolves at its completion: signaled, and it needs its own wake-up.
    wr.signaled = item.resolve !== undefined;
    if (wr.signaled) this.#await(item);
    return wr;
  }

  /** Header flags of the next message: the credit stall is told once. */
  #flags(): number {
    if (!this.#creditStalled) return 0;
    this.#creditStalled = false;
    return WIRE_FLAG_CREDIT_STALLED;
  }

  /**
   * Selective signaling: every SIGNAL_EVERY-th and the last of each batch, so all get reaped.
   * READs do not count: a chain of them ends in a signaled one (or the batch's last), and
   * they hold no send slot to give back sooner, so a read() of 192 costs one completion.
   */
  #post(lane: Lane, n: number): boolean {
    if (n === 0) return true;
    const batch = this.#batch;
    for (let i = 0; i < n; i++) {
      const wr = batch[i] as SendWr;
      if (
        wr.signaled === true ||
        i === n - 1 ||
        (wr.opcode !== 'RDMA_READ' && ++lane.unsignaled >= SIGNAL_EVERY)
      ) {
        wr.signaled = true;
        lane.unsignaled = 0;
      }
    }
    return this.#postNow(lane, n, undefined, 0);
  }

  /**
   * Posts the batch's first `n` WRs, or with `list` its records [from, from + n) (a read
   * list's run, as it is); false when the post failed (the lane's items are settled then).
   */
  #postNow(lane: Lane, n: number, list: SendWrList | undefined, from: number): boolean {
    try {
      if (list !== undefined) {
        lane.qp.postSendList(list, from, n);
        this.#stats.posts++;
      } else {
        // One WR goes alone, more in a list of their exact length (the batch array is
        // filled by index and never shortened: see PostLists).
        const batch = this.#batch;
        for (let i = 0; i < n; i += POST_LIST_MAX) {
          const k = Math.min(POST_LIST_MAX, n - i);
          // Loaded on both paths (as in ReceivePool.giveBackAll): no keyed load without feedback.
          const first = batch[i] as SendWr;
          lane.qp.postSend(k === 1 ? first : this.#lists.list(batch, i, k));
          this.#stats.posts++;
        }
      }
      // A full send queue holds back what follows until its completions are reaped.
      if (lane.sqUsed >= lane.max && this.#armed === ARM_SOLICITED) this.#arm();
      // A reply may follow within microseconds: poll for it (adaptive), from spinUs on.
      this.#s.pollLoop?.activity(this.#poll);
      return true;
    } catch (err) {
      if (lane === this.#readLane) {
        this.#failReads(readFailure(`post of READs on QP ${lane.qp.qpn} failed`, err));
      } else {
        this.destroy(
          new MuxConnectionError(
            'ERR_MUX_CONNECTION_LOST',
            `post on QP ${lane.qp.qpn} failed`,
            err,
          ),
        );
      }
      return false;
    }
  }

  /** A signaled completion: it and every WR posted before it on the lane are done. */
  #retire(lane: Lane, wrId: number): void {
    // How far the completed WR is from the oldest posted one (sequences wrap together).
    const d = (wrId - RECV_WR_ID_LIMIT - lane.nextSeq + lane.sqUsed) & WR_SEQ_MASK;
    if (d >= lane.sqUsed)
      throw new MuxProtocolError(`completion of WR ${wrId}, not posted on QP ${lane.qp.qpn}`);
    for (let k = 0; k <= d; k++) {
      const item = lane.ringItems[lane.ringHead];
      lane.ringItems[lane.ringHead] = undefined;
      lane.ringHead = (lane.ringHead + 1) % lane.max;
      lane.sqUsed--;
      if (item !== undefined) this.#completed(item);
    }
  }

  /** `item` is posted and waited for: its completion must wake this side. */
  #await(item: OutItem): void {
    item.awaited = true;
    this.#awaited++;
    if (this.#armed === ARM_SOLICITED) this.#arm();
  }

  /**
   * This side waits for its own completions: a send() or READ awaits one, close waits for
   * everything posted, or a full send queue holds back what is queued (or a credit update).
   */
  #needsOwn(): boolean {
    if (this.#awaited > 0 || this.#idle !== undefined) return true;
    for (const l of this.#lanes) if (l.sqUsed >= l.max) return true;
    return this.#readLane.sqUsed >= this.#readLane.max;
  }

  /**
   * Arms the CQ's event before sleeping: for the peer's (solicited) SENDs only, unless this
   * side needs its own completions, so it is not woken for every send it made.
   */
  #arm(): void {
    const cq = this.#res.cq;
    if (this.#needsOwn()) {
      this.#armed = ARM_ANY;
      cq.requestNotify();
    } else {
      this.#armed = ARM_SOLICITED;
      // Asleep: only the peer's SENDs (all posted solicited) and failures wake this side,
      // never its own send completions (reaped at the next wake-up instead).
      cq.requestNotify(NOTIFY_SOLICITED_ONLY);
    }
  }

  #completed(item: OutItem): void {
    if (item.awaited) this.#awaited--;
    if (item.kind === KIND_SEND) {
      const slot = item.slot;
      item.slot = undefined;
      if (slot !== undefined) this.#putSlot(slot);
      item.settle();
    } else if (item.kind === KIND_LIST) {
      // An abandoned read rejects with its own error, a flushed one with the read QP's.
      item.settle(item.failure ?? this.#retireErr);
    } else {
      this.#readDone(item.read as ReadOp);
    }
    this.#putItem(item);
    this.#inFlight--;
    this.#checkIdle();
  }

  #checkIdle(): void {
    if (this.#inFlight === 0 && this.#sources.size === 0 && this.#idle !== undefined) {
      const f = this.#idle;
      this.#idle = undefined;
      f();
    }
  }

  /**
   * An explicit update when credits or window space are owed and nothing carries them: at
   * ReceiveCredits' threshold or flush delay (which also covers window returns, see
   * `oweReturn`: one delay, one timer), or at once when the window runs low.
   */
  #maybeCreditUpdate(force = false): void {
    // After either side's goaway the peer sends nothing that credits could be waiting for.
    if (this.#terminal() || this.#quiet || this.#peerGoAway) return;
    const rc = this.#recvCredits;
    const local = this.#s.local;
    const windowPressing =
      this.#creditMessages > 0 &&
      (this.#peerBytes + this.#creditBytes >= local.windowBytes / 2 ||
        this.#peerMessages + this.#creditMessages >= local.windowMessages / 2 ||
        this.#creditBytes >= local.windowBytes / 4 ||
        this.#creditMessages >= local.windowMessages / 4);
    if (!force && !rc.updateNeeded && !windowPressing) return;
    if (rc.unreturned === 0 && this.#creditMessages === 0) return;
    // A queued send that can go now carries them anyway.
    if (this.#sendCredits.usable > 0) {
      for (const l of this.#lanes) if (l.head < l.tail && l.sqUsed < l.max) return;
    }
    const lane = this.#lanes[0] as Lane;
    if (lane.sqUsed >= lane.max) return; // again once completions free a slot
    if (!this.#sendCredits.tryConsumeReserved()) return; // again when the peer grants
    const item = this.#sendItem(WIRE_HEADER_BYTES);
    const slot = item.slot as SendSlot;
    const b = slot.bytes;
    encodeWireHeader(b, WireType.Credit, 0, 0, 0);
    stampWireHeader(b, rc.takeUpdate(), this.#creditMessages, this.#creditBytes, this.#flags());
    this.#creditMessages = 0;
    this.#creditBytes = 0;
    this.#inFlight++;
    this.#stats.creditUpdates++;
    this.#stats.framesOut++;
    slot.sge.length = WIRE_HEADER_BYTES;
    slot.sgList.length = 1;
    slot.wr.wrId = this.#ringPush(lane, item);
    slot.wr.signaled = true;
    this.#batch[0] = slot.wr;
    this.#post(lane, 1);
  }

  async #acquire(
    ch: RdmaChannel,
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
        return new MuxError('ERR_MUX_TOO_LARGE', 'message larger than the send window', {
          cause: err,
        });
      }
      return this.#error ?? new MuxClosedError('send', err);
    }
    return err as Error;
  }

  // ---- completions ----

  readonly #onCq = (): void => {
    // The event is one-shot: fired, it is armed no more.
    this.#armed = ARM_NONE;
    this.#drain(true);
  };

  /** A drain that stopped early (`#drain`'s `yieldable`) goes on after the microtasks. */
  readonly #resume = (): void => {
    this.#resumeScheduled = false;
    this.#drain(true);
  };

  /**
   * Reaps completions until the CQ is empty, then re-arms (or spins / polls on, by policy).
   * `yieldable`: once this drain handed messages to the application, it stops before the
   * posted buffers fall below the copy-out mark (#onReceive) and goes on from the check
   * phase, after the application's continuations ran and released them. At many channels a
   * drain otherwise copied out (allocating per message) every arrival beyond three quarters
   * of the lease, for buffers held only until the end of the tick; a receiver that keeps its
   * messages still gets copies (the next drain starts with nothing handed out). A drain that
   * must take everything (goaway, close) passes false.
   */
  #drain(yieldable = false): void {
    if (this.#terminal() || this.#draining) return;
    this.#draining = true;
    const cq = this.#res.cq;
    const wcs = this.#wcs;
    const loop = this.#s.pollLoop;
    const received = this.#stats.framesIn;
    const rc = this.#recvCredits;
    let reaped = 0;
    let yielded = false;
    try {
      // Twice at most: what the flush posted may have completed already (soft completes a
      // SEND within its post): reaped now, not by an arm that would fire at once for it.
      for (let round = 0; round < 2 && !yielded; round++) {
        for (;;) {
          // Arrivals this poll may take before the copy-out mark.
          let max = wcs.length;
          if (yieldable && this.#stats.framesIn !== received) {
            max = Math.min(max, rc.posted - this.#copyOutMark());
            if (max <= 0) {
              yielded = true;
              break;
            }
          }
          const n = cq.poll(wcs, max);
          for (let i = 0; i < n && !this.#terminal(); i++)
            this.#onCompletion(wcs[i] as WorkCompletion);
          if (this.#terminal()) return;
          reaped += n;
          if (n < max) break;
        }
        if (round === 0 && loop !== undefined && this.#stats.framesIn !== received)
          loop.received(this.#poll);
        this.#flushAll();
        if (this.#terminal()) return;
        if (cq.pending() === 0) break;
      }
      // Several messages delivered: their handlers' sends (microtasks queued before this
      // flush) and releases batch. One message (a ping-pong) keeps the idle lane's post and
      // the repost at once.
      this.#burst = this.#stats.framesIn - received > 1;
      if (this.#burst && !this.#flushScheduled) {
        this.#batchTick = true;
        this.#flushScheduled = true;
        queueMicrotask(this.#flushTask);
      }
      if (yielded) {
        // Not armed: drained on from the check phase (after this tick's microtasks).
        if (!this.#resumeScheduled) {
          this.#resumeScheduled = true;
          setImmediate(this.#resume);
        }
      } else if (this.#s.pollPolicy === 'busy') setImmediate(this.#onCq);
      // Adaptive: after activity the loop polls on from its next turn (and arms the event
      // when it stops); otherwise arm now.
      else if (loop === undefined || !(reaped > 0 ? loop.activity(this.#poll) : this.#poll.polled))
        this.#arm();
    } catch (err) {
      const typed = typeof (err as { code?: unknown })?.code === 'string';
      this.destroy(
        typed ? (err as Error) : new MuxProtocolError(String((err as Error)?.message ?? err)),
      );
    } finally {
      this.#draining = false;
    }
  }

  #onCompletion(wc: WorkCompletion): void {
    if (wc.wrId >= RECV_WR_ID_LIMIT && wc.qpNum === this.#readLane.qp.qpn) {
      if (this.#readFlushTimer !== undefined) {
        // Flushing after an abandoned read: retire in order; what completed before the
        // error resolves, what was flushed rejects.
        this.#retireErr = wc.status === 'SUCCESS' ? undefined : this.#readFailed;
        try {
          this.#retire(this.#readLane, wc.wrId);
        } finally {
          this.#retireErr = undefined;
        }
        if (this.#readLane.sqUsed === 0) this.#readFlushed();
        return;
      }
      // A READ the peer refused (REM_ACCESS_ERR: its region is closed) fails the read QP:
      // the reads fail, the channels on the other QPs go on. After it, the QP's flushed
      // completions name WRs already settled.
      if (this.#readFailed !== undefined) return;
      if (wc.status !== 'SUCCESS') {
        this.#failReads(
          readFailure(
            `a one-sided READ failed: ${wc.status} (QP ${wc.qpNum})`,
            new RdmaCompletionError(wc.status, wc.wrId, wc.vendorErr, false),
          ),
        );
        return;
      }
    }
    if (wc.status !== 'SUCCESS') {
      if (wc.status === 'RNR_RETRY_EXC_ERR') this.#stats.rnrCount++;
      // A failed receive still took a buffer of the shared pool: it goes back.
      if (wc.wrId < RECV_WR_ID_LIMIT) this.#res.reclaimReceive(wc.wrId);
      throw new MuxConnectionError(
        'ERR_MUX_CONNECTION_LOST',
        `RDMA work request failed: ${wc.status} (QP ${wc.qpNum})`,
        new RdmaCompletionError(wc.status, wc.wrId, wc.vendorErr, isRetryableStatus(wc.status)),
      );
    }
    if (wc.opcode === 'RECV') {
      if (wc.qpNum === this.#readLane.qp.qpn) {
        // The read QP carries this side's READs only (it shares the receive pool, so a SEND
        // on it would take a buffer): a peer that sends there breaks the protocol.
        this.#res.reclaimReceive(wc.wrId);
        throw new MuxProtocolError(`a SEND arrived on the read QP ${wc.qpNum}`);
      }
      this.#onReceive(wc.wrId, wc.byteLen);
      return;
    }
    const lane = this.#laneByQpn.get(wc.qpNum);
    if (lane === undefined) throw new MuxProtocolError(`completion for unknown QP ${wc.qpNum}`);
    this.#retire(lane, wc.wrId);
  }

  /**
   * Posted buffers below which eager arrivals are copied out: a quarter of the lease, above
   * the credits reserved for updates — the sender can never use those, so a mark at or below
   * them (a lease of 4: a quarter is the 1 reserved) would never be reached and a receiver
   * holding its buffers would stall its sender until it released one.
   */
  #copyOutMark(): number {
    return this.#s.receiveCredits.reservedCredits + Math.ceil(this.#recvCredits.capacity / 4);
  }

  /**
   * An eager message copied out of its receive buffer, which is reposted at once. Its own
   * method: the release closure's context would otherwise be allocated for every message.
   */
  #copyOut(
    idx: number,
    bytes: Uint8Array,
    channel: number,
    seq: number,
    length: number,
    charge: number,
  ): InboundMessage {
    this.#stats.receiveCopies++;
    const copy = this.#alloc.alloc(Math.max(1, length));
    copy.bytes.set(bytes.subarray(WIRE_HEADER_BYTES, WIRE_HEADER_BYTES + length));
    this.#repost(idx, true);
    const release = () => {
      copy.release();
      this.#released(charge);
    };
    return new InboundMessage(channel, seq, copy.bytes.subarray(0, length), release, copy);
  }

  #onReceive(wrId: number, byteLen: number): void {
    const pool = this.#pool;
    // Ours from here (teardown gives it back to the pool if handling it fails).
    const idx = pool.take(wrId, this);
    const block = pool.block(idx);
    // Exact: an honest peer holds a credit for every SEND (flowctl's peerCredits counts it
    // until it arrives). One without took a buffer of the shared pool that another peer's
    // credit stands for, so it is a protocol error, never forgiven.
    const rc = this.#recvCredits;
    if (rc.peerCredits <= 0 || !rc.onReceive())
      throw new MuxProtocolError('the peer sent beyond its lease of receive credits');
    this.#stats.framesIn++;
    const bytes = block.bytes;
    const h = decodeWireHeader(bytes, byteLen, this.#s.eagerLimit, this.#hdr);
    this.#maybeGrowLease(h.flags & WIRE_FLAG_CREDIT_STALLED);
    if (this.#peerGoAway) throw new MuxProtocolError(`message (type ${h.type}) after goaway`);
    if (h.credits > 0) {
      try {
        this.#sendCredits.grant(h.credits);
      } catch (err) {
        throw new MuxProtocolError(`bad credit grant: ${(err as Error).message}`);
      }
    }
    if (h.releasedMessages > 0 || h.releasedBytes > 0)
      this.#credit(h.releasedMessages, h.releasedBytes);
    switch (h.type) {
      case WireType.Data: {
        const ch = this.#receiving(h.channel, h.seq);
        const charge = this.#charge(h.length);
        this.#stats.messagesReceived++;
        this.#stats.bytesReceived += h.length;
        this.#stats.eagerReceived++;
        // Buffers running low (the application holds many): copy out and repost at once, so
        // a receiver holding up to its window never starves its sender of buffers.
        const m =
          this.#recvCredits.posted < this.#copyOutMark()
            ? this.#copyOut(idx, bytes, h.channel, h.seq, h.length, charge)
            : pool.hold(idx, h.channel, h.seq, h.length, charge);
        ch.arrive(m);
        return;
      }
      case WireType.Ready: {
        const ch = this.#receiving(h.channel, h.seq);
        const n = decodeRendezvousNotice(
          bytes.subarray(WIRE_HEADER_BYTES, WIRE_HEADER_BYTES + RENDEZVOUS_NOTICE_BYTES),
          {
            eagerThreshold: this.#s.eagerLimit,
            maxMessageBytes: this.#s.local.maxFrameBytes,
          },
        );
        if (n.length !== h.length)
          throw new MuxProtocolError('ready: notice and header lengths differ');
        if (n.addr + BigInt(n.length) > BigInt(Number.MAX_SAFE_INTEGER))
          throw new MuxProtocolError('ready: address beyond 2^53');
        const charge = this.#charge(h.length);
        this.#repost(idx, true);
        if (this.#quiet) {
          // Offered before the peer saw our goaway, for a channel closed here: never read (the
          // peer gives the source up on our goaway, which says all our READs are done).
          this.#released(charge);
          return;
        }
        // Checked above against the window and the announced limit before allocating.
        const dst = this.#alloc.alloc(n.length);
        const op: ReadOp = {
          token: n.token,
          remoteAddr: Number(n.addr),
          rkey: n.rkey,
          length: n.length,
          dst,
          ch,
          slot: ch.reserve(),
          seq: h.seq,
          charge,
        };
        this.#reads.add(op);
        const item = this.#items.take() ?? new OutItem();
        item.kind = KIND_READ;
        item.read = op;
        this.#enqueue(ch.lane, item);
        return;
      }
      case WireType.Done: {
        const n = decodeRendezvousNotice(
          bytes.subarray(WIRE_HEADER_BYTES, WIRE_HEADER_BYTES + RENDEZVOUS_NOTICE_BYTES),
          {
            eagerThreshold: this.#s.eagerLimit,
            maxMessageBytes: this.#s.local.maxFrameBytes,
          },
        );
        const src = this.#sources.get(n.token);
        if (n.kind !== NoticeKind.Done || src === undefined)
          throw new MuxProtocolError(`done for unknown rendezvous ${n.token}`);
        this.#repost(idx, true);
        this.#sources.delete(n.token);
        if (src.own) src.block.release();
        src.settle?.();
        this.#checkIdle();
        return;
      }
      case WireType.Open: {
        if (h.channel % 2 !== (this.role === 'client' ? 0 : 1))
          throw new MuxProtocolError(
            `the peer opened channel ${h.channel}, which is not its to open`,
          );
        if (this.#channels.has(h.channel))
          throw new MuxProtocolError(`channel ${h.channel} opened twice`);
        if (this.#open >= this.#s.maxChannels)
          throw new MuxProtocolError(`the peer opened more than ${this.#s.maxChannels} channels`);
        const name = Buffer.from(
          bytes.buffer,
          bytes.byteOffset + WIRE_HEADER_BYTES,
          h.length,
        ).toString('utf8');
        this.#repost(idx, true);
        const ch = new RdmaChannel(this, h.channel, name, this.#laneOf(h.channel));
        this.#channels.set(h.channel, ch);
        this.#open++;
        this.emit('channel', ch);
        return;
      }
      case WireType.Close: {
        const ch = this.#channels.get(h.channel);
        if (ch === undefined || ch.closeReceived)
          throw new MuxProtocolError(`bad close of channel ${h.channel}`);
        this.#repost(idx, true);
        ch.arriveClose();
        this.#maybeForget(ch);
        return;
      }
      case WireType.Credit:
        // Not flushed by the timer: an update answering an update would never end.
        this.#repost(idx, false);
        return;
    }
  }

  /** @internal The application released the message of pool buffer `idx` (ReceivePool). */
  recvReleased(idx: number): void {
    const charge = this.#pool.charges[idx] as number;
    if ((this.#flushScheduled || this.#burst) && !this.#terminal()) {
      // Several released in this tick (many channels): reposted together, in one SRQ post, by
      // the flush (which also checks for an update once, after all of them).
      this.#reposts[this.#repostCount++] = idx;
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        queueMicrotask(this.#flushTask);
      }
      this.#released(charge, false);
      return;
    }
    // One check for an update, after both the credit and the window space are owed.
    this.#repost(idx, true, false);
    this.#released(charge);
  }

  /**
   * The buffers released since the flush was scheduled go back (teardown took them if ended).
   * Their credits are owed only once they are posted: those a post refused for now stay.
   */
  #repostReleased(): void {
    const n = this.#repostCount;
    this.#repostCount = 0;
    if (this.#terminal()) return; // the pool took them back (forget) at teardown
    let left: number;
    try {
      left = this.#pool.giveBackAll(this.#reposts, n, this);
    } catch (err) {
      this.destroy(new MuxConnectionError('ERR_MUX_CONNECTION_LOST', 'receive repost failed', err));
      return;
    }
    // A credit-only update's buffer among them (refused before) counts as a data credit
    // here: it goes back by the flush delay at the latest, once, not an endless echo.
    if (left < n) {
      this.#recvCredits.release(n - left);
      this.#repostAttempts = 0; // progress: the backoff starts over
    }
    this.#repostCount = left;
    if (left > 0) this.#repostLater();
  }

  /**
   * Reposts refused for now go again from a short unref'd timer, backing off, up to
   * REPOST_ATTEMPTS times; then the connection fails, naming the post's error.
   */
  #repostLater(): void {
    if (this.#repostAttempts >= REPOST_ATTEMPTS) {
      this.destroy(
        new MuxConnectionError(
          'ERR_MUX_CONNECTION_LOST',
          `receive repost failed: ${this.#repostCount} buffer(s) refused ${REPOST_ATTEMPTS + 1} times (${this.#pool.lastDeferral?.message ?? 'unknown'})`,
          this.#pool.lastDeferral,
        ),
      );
      return;
    }
    this.#stats.repostRetries++;
    const delay = Math.min(REPOST_RETRY_MAX_MS, REPOST_RETRY_FIRST_MS << this.#repostAttempts);
    this.#repostAttempts++;
    this.#repostTimer = setTimeout(this.#repostRetry, delay);
    this.#repostTimer.unref();
  }

  readonly #repostRetry = (): void => {
    this.#repostTimer = undefined;
    if (this.#terminal()) return;
    // The flush reposts them, then posts what waited and sends credits now due.
    this.#flushAll();
  };

  /**
   * A busy peer gets a bigger lease: when it says it waited for a credit (`stalled`), or when
   * the credits it holds (or has on the way) are down to a quarter of its lease (this side's
   * application holds its buffers). Doubled, up to `recvBufferCount`, while the shared pool
   * has buffers for growth; an idle sender gives the extra back after `leaseIdleMs`
   * (LeaseReturn).
   */
  #maybeGrowLease(stalled: number): void {
    const rc = this.#recvCredits;
    const cap = rc.capacity;
    if (stalled === 0 && rc.peerCredits > cap >> 2) return;
    if (this.#quiet || this.#peerGoAway) return;
    const n = Math.min(cap, this.#res.maxLease - cap);
    if (n > 0 && this.#res.tryLeaseMore(n)) rc.grow(n);
  }

  /** The channel of a Data or Ready, checked: open for receiving, next in sequence. */
  #receiving(id: number, seq: number): RdmaChannel {
    const ch = this.#channels.get(id);
    if (ch === undefined || ch.closeReceived)
      throw new MuxProtocolError(`message for unknown channel ${id}`);
    if (seq !== ch.recvSeq)
      throw new MuxProtocolError(`channel ${id}: sequence ${seq}, expected ${ch.recvSeq}`);
    ch.recvSeq = (ch.recvSeq + 1) >>> 0;
    return ch;
  }

  /** Window accounting of an arriving message: refused before anything is allocated for it. */
  #charge(length: number): number {
    const charge = length + FRAME_HEADER_BYTES;
    const local = this.#s.local;
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
    return charge;
  }

  #readDone(op: ReadOp): void {
    this.#reads.delete(op);
    this.#stats.messagesReceived++;
    this.#stats.bytesReceived += op.length;
    this.#stats.rendezvousReceived++;
    const dst = op.dst;
    const m = new InboundMessage(
      op.ch.id,
      op.seq,
      dst.bytes,
      () => {
        if (!dst.released) dst.release();
        this.#released(op.charge);
      },
      dst,
    );
    // The sender may release its block now.
    const item = this.#sendItem(WIRE_HEADER_BYTES + RENDEZVOUS_NOTICE_BYTES);
    const b = (item.slot as SendSlot).bytes;
    encodeWireHeader(b, WireType.Done, 0, 0, 0);
    encodeRendezvousNotice(b, WIRE_HEADER_BYTES, {
      kind: NoticeKind.Done,
      token: op.token,
      addr: 0n,
      length: 0,
      rkey: 0,
    });
    this.#enqueue(op.ch.lane, item);
    op.ch.fill(op.slot, m);
  }

  /** A receive buffer is free again: back to the shared pool, its credit owed to the peer. */
  #repost(idx: number, fromData: boolean, update = true): void {
    if (this.#terminal()) {
      // The lease went back at teardown: the pool reposts the buffer or frees it.
      try {
        this.#pool.giveBack(idx);
      } catch {
        // the SRQ is gone with the transport: the buffer was freed
      }
      return;
    }
    // Refused ones wait for their timer: this one joins them (credit owed once posted).
    let posted = false;
    try {
      posted = this.#repostTimer === undefined && this.#pool.giveBack(idx, this);
    } catch (err) {
      this.destroy(new MuxConnectionError('ERR_MUX_CONNECTION_LOST', 'receive repost failed', err));
      return;
    }
    if (!posted) {
      this.#reposts[this.#repostCount++] = idx;
      if (this.#repostTimer === undefined) this.#repostLater();
      return;
    }
    // A credit-only update's buffer is not the application's: its credit waits for the
    // threshold or the next message, or every update would answer the last one forever.
    if (fromData) this.#recvCredits.release(1);
    else this.#recvCredits.releaseUpdate();
    // At once, not in a microtask (Node's queueMicrotask allocates): an update goes only when
    // due, else the flush timer or the next send carries the credits. A drain ends with this.
    if (update && !this.#draining) this.#maybeCreditUpdate();
  }

  /** The peer released `messages` messages of `bytes` (headers included) in total. */
  #credit(messages: number, bytes: number): void {
    if (
      messages === 0 ||
      messages > this.#window.messagesInFlight ||
      bytes > this.#window.bytesInFlight ||
      bytes < messages * FRAME_HEADER_BYTES
    ) {
      throw new MuxProtocolError(
        `window return of ${messages} messages, ${bytes} bytes: more than was sent`,
      );
    }
    try {
      for (let i = 1; i < messages; i++) this.#window.release(0);
      this.#window.release(bytes);
    } catch (err) {
      throw new MuxProtocolError(`bad window return: ${(err as Error).message}`);
    }
  }

  /** The application released a received message: its window space goes back to the peer. */
  #released(charge: number, update = true): void {
    this.#held -= charge;
    if (this.#terminal()) return;
    this.#creditBytes += charge;
    this.#creditMessages++;
    this.#peerBytes -= charge;
    this.#peerMessages--;
    // The window space goes back with the next message, or by the credits' flush delay.
    this.#recvCredits.oweReturn();
    if (update && !this.#draining) this.#maybeCreditUpdate();
  }

  // ---- control connection, lifecycle ----

  #onControl(type: ControlType, payload: Uint8Array): void {
    if (type === ControlType.LeaseReturn) {
      this.#onLeaseReturn(payload);
      return;
    }
    if (type === ControlType.GoAway) {
      if (this.#peerGoAway) return;
      // What the peer sent before its goaway completed, so it is in our CQ: take it first.
      this.#drain();
      if (this.#terminal()) return;
      this.#peerGoAway = true;
      this.#abandonForPeer();
      for (const ch of this.#channels.values()) if (!ch.closeReceived) ch.arriveClose();
      void this.#peerClosing();
    } else if (type === ControlType.Setup || type === ControlType.Ready) {
      this.destroy(new MuxProtocolError(`control message ${type} after setup`));
    }
    // Ping: liveness only (any message counts).
  }

  /** The peer gave back credits of its grown lease: the pool may shrink by as many. */
  #onLeaseReturn(payload: Uint8Array): void {
    if (this.#terminal()) return;
    const n = readU32(payload, 0); // ControlLink checked it is LEASE_RETURN_BYTES long
    try {
      if (n === 0) throw new MuxProtocolError('lease return of 0 credits');
      this.#recvCredits.peerReturned(n);
    } catch (err) {
      this.destroy(
        err instanceof MuxError
          ? err
          : new MuxProtocolError(`bad lease return: ${(err as Error).message}`),
      );
      return;
    }
    this.#res.unlease(n);
  }

  /**
   * A sender learns that its lease grew only from credits beyond those it has outstanding
   * (SendCredits.grant): while some of its credits are still owed to it, a growth credit
   * that came back looks like a return. It gives its lease back (LeaseReturn, by the control
   * link) by what it can see, so the lease stays above the initial size here by what it
   * could not see until every credit owed to it is back. The credits of credit-only updates
   * have no flush delay (an update answering an update would never end), and an update
   * that crossed the LeaseReturn lands after it: owed for good, and the lease with them.
   * So a peer that sent nothing for a whole tick, while its lease here is above the initial
   * size and its buffers are all free, gets everything owed in one update: it then sees its
   * whole lease and gives the rest back. Its own update credit for that one is answered only
   * while its lease from this side is above the initial too, so the exchange ends once both
   * leases are back at their initial size.
   */
  #maybeSettleLease(): void {
    const framesIn = this.#stats.framesIn;
    const quiet = framesIn === this.#framesInAtTick;
    this.#framesInAtTick = framesIn;
    const rc = this.#recvCredits;
    if (!quiet || rc.unreturned === 0 || rc.inUse > 0) return;
    if (rc.capacity <= this.#s.receiveCredits.initialCredits) return;
    this.#maybeCreditUpdate(true);
  }

  /**
   * An idle sender (no credit used for `leaseIdleMs`) gives what its lease grew by back to
   * the peer's pool, out of band: a LeaseReturn needs no receive buffer.
   */
  #maybeReturnLease(now: number): void {
    const sc = this.#sendCredits;
    const consumed = sc.dataConsumed;
    if (consumed !== this.#consumedAtTick) {
      this.#consumedAtTick = consumed;
      this.#idleSince = now;
      return;
    }
    if (sc.extra === 0 || now - this.#idleSince < this.#s.leaseIdleMs) return;
    if (this.#state !== 'open' || this.#quiet || this.#peerGoAway) return;
    const n = sc.giveBack();
    if (n === 0) return;
    const payload = new Uint8Array(LEASE_RETURN_BYTES);
    writeU32(payload, 0, n);
    this.#link.send(ControlType.LeaseReturn, payload);
  }

  /** An idle connection gives back what its pools kept beyond IDLE_POOL_KEEP. */
  #trimPools(): void {
    const small = this.#smallSlots;
    while (small.size > IDLE_POOL_KEEP) quietly((small.take() as SendSlot).block);
    const large = this.#largeSlots;
    while (large.size > IDLE_POOL_KEEP) quietly((large.take() as SendSlot).block);
    while (this.#items.size > IDLE_POOL_KEEP) this.#items.take();
  }

  #onLinkClosed(cause: Error | undefined): void {
    if (this.#terminal()) return;
    if (this.#state === 'closing' || this.#peerGoAway) {
      this.#finish();
      return;
    }
    this.destroy(
      cause instanceof MuxError
        ? cause
        : new MuxConnectionError(
            'ERR_MUX_CONNECTION_LOST',
            `connection to ${this.remoteAddress} lost`,
            cause,
          ),
    );
  }

  /**
   * The peer's goaway says it closed every channel, completed every READ and will post
   * nothing more: what is still queued for it (not posted) would only be discarded there, and
   * rendezvous sources it did not read will never see a Done. Both end here, so closing waits
   * only for what is already posted.
   */
  #abandonForPeer(): void {
    const err = new MuxClosedError(`connection to ${this.remoteAddress} (the peer went away)`);
    for (const lane of this.#lanes) {
      // A READ partly posted (only the head can be) keeps going: its chunks write into dst.
      const head = lane.fifo[lane.head];
      const keep = head !== undefined && head.kind === KIND_READ && head.posted > 0 ? 1 : 0;
      for (let i = lane.head + keep; i < lane.tail; i++) {
        const item = lane.fifo[i] as OutItem;
        lane.fifo[i] = undefined;
        if (item.kind === KIND_READ) {
          const op = item.read as ReadOp;
          this.#reads.delete(op);
          quietly(op.dst);
          this.#held -= op.charge;
        } else if (item.slot !== undefined) {
          this.#putSlot(item.slot);
        }
        item.settle(err);
        this.#putItem(item);
        this.#inFlight--;
      }
      lane.tail = lane.head + keep;
      if (keep === 0) {
        lane.head = 0;
        lane.tail = 0;
      }
    }
    for (const src of this.#sources.values()) {
      if (src.own) quietly(src.block);
      src.settle?.(err);
    }
    this.#sources.clear();
    this.#checkIdle();
  }

  async #peerClosing(): Promise<void> {
    if (this.#state !== 'open') return;
    this.#setState('closing');
    this.#window.close();
    // Bounded: a peer that said GoAway but never completes what we sent is dropped.
    const ms = this.defaultTimeoutMs;
    const timer = setTimeout(
      () => this.destroy(new MuxDeadlineError(`graceful end of ${this.remoteAddress}`, ms)),
      ms,
    );
    await this.#whenIdle();
    clearTimeout(timer);
    if (this.#now() === 'closing') {
      this.#quiet = true;
      this.#link.end();
    }
  }

  #whenIdle(): Promise<void> {
    if (this.#inFlight === 0 && this.#sources.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const prev = this.#idle;
      this.#idle = () => {
        prev?.();
        resolve();
      };
      // Closing waits for this side's own completions too: they must wake it.
      if (this.#armed === ARM_SOLICITED) this.#arm();
    });
  }

  #tick(): void {
    const now = performance.now();
    // Sources are kept in offer order: the first is the oldest.
    const oldest = this.#sources.values().next().value;
    if (oldest !== undefined && now - oldest.since > this.#s.doneTimeoutMs) {
      this.destroy(
        new MuxConnectionError(
          'ERR_MUX_PEER_TIMEOUT',
          `${this.remoteAddress} did not read an offered block within ${this.#s.doneTimeoutMs} ms`,
        ),
      );
      return;
    }
    if (now - this.#link.lastRead > this.#s.peerTimeoutMs) {
      setImmediate(() => {
        if (performance.now() - this.#link.lastRead <= this.#s.peerTimeoutMs) return;
        this.destroy(
          new MuxConnectionError(
            'ERR_MUX_PEER_TIMEOUT',
            `nothing from ${this.remoteAddress} for ${this.#s.peerTimeoutMs} ms`,
          ),
        );
      });
      return;
    }
    this.#maybeReturnLease(now);
    this.#maybeSettleLease();
    if (now - this.#idleSince >= this.#s.leaseIdleMs) this.#trimPools();
    if (now - this.#link.lastWrite >= this.#s.heartbeatIntervalMs / 2)
      this.#link.send(ControlType.Ping);
  }

  /** A channel closed on this side: its Close follows its data on its QP. */
  channelClosed(ch: RdmaChannel): void {
    // After the peer's goaway it needs no Close: its goaway ended every channel.
    if ((this.#state === 'open' || this.#state === 'closing') && !this.#peerGoAway) {
      const item = this.#sendItem(WIRE_HEADER_BYTES);
      encodeWireHeader((item.slot as SendSlot).bytes, WireType.Close, ch.id, 0, 0);
      this.#enqueue(ch.lane, item);
    }
    this.#maybeForget(ch);
  }

  #maybeForget(ch: RdmaChannel): void {
    if (
      ch.closeReceived &&
      ch.state !== 'open' &&
      ch.state !== 'closing' &&
      this.#channels.get(ch.id) === ch
    ) {
      this.#channels.delete(ch.id);
      this.#open--;
    }
  }

  async close(options?: WaitOptions): Promise<void> {
    const timeoutMs = timeoutOf(options, this.defaultTimeoutMs);
    const signal = signalOf(options);
    if (this.#state === 'closed' || this.#state === 'failed') return;
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
      if (this.#state === 'open') {
        this.#setState('closing');
        await Promise.allSettled([...this.#channels.values()].map((ch) => ch.close({ timeoutMs })));
        // Every SEND completed (so it is in the peer's CQ) and every block was read.
        if (this.#now() === 'closing') await this.#whenIdle();
        if (this.#now() === 'closing') {
          // From here nothing more is posted: the peer drains its CQ on our goaway and then
          // takes any later message for a protocol violation.
          this.#quiet = true;
          if (!this.#peerGoAway) this.#link.send(ControlType.GoAway);
          this.#link.end();
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
    if (this.#terminal()) return Promise.resolve();
    return new Promise<void>((resolve) => this.once('close', () => resolve()));
  }

  #finish(): void {
    if (this.#terminal()) return;
    this.#drain();
    if (this.#terminal()) return;
    // Terminal before teardown: buffers released from now on are freed, not reposted.
    this.#state = 'closed';
    this.#teardown(new MuxClosedError(`connection to ${this.remoteAddress}`));
    for (const ch of this.#channels.values()) ch.finish();
    this.#channels.clear();
    this.#open = 0;
    // Space the peer did not return (it releases nothing after its goaway) goes back to the
    // transport's shared budget: nothing is in flight on a closed connection.
    this.#window.close();
    this.#window.destroy();
    this.emit('state', 'closed');
    this.emit('close', undefined);
  }

  destroy(error?: Error): void {
    if (this.#terminal()) return;
    const err = error ?? new MuxClosedError(`connection to ${this.remoteAddress}`);
    this.#error = err;
    const final: ConnectionState = error === undefined ? 'closed' : 'failed';
    this.#state = final;
    this.#teardown(err);
    this.#window.destroy(err);
    for (const ch of this.#channels.values()) ch.fail(err);
    this.#channels.clear();
    this.#open = 0;
    this.#link.destroy();
    this.emit('state', final);
    if (error !== undefined && this.listenerCount('error') > 0) this.emit('error', err);
    this.emit('close', error === undefined ? undefined : err);
  }

  /** QPs go first (nothing touches memory after), then every block this connection holds. */
  #teardown(err: Error): void {
    clearInterval(this.#heartbeat);
    clearTimeout(this.#readFlushTimer);
    this.#readFlushTimer = undefined;
    this.#readClock.dispose();
    clearTimeout(this.#repostTimer);
    this.#repostTimer = undefined;
    this.#s.pollLoop?.remove(this.#poll);
    this.#res.cq.off('completion', this.#onCq);
    const lanes = [...this.#lanes, this.#readLane];
    for (const lane of lanes) {
      try {
        lane.qp.close();
      } catch {
        // closed with the resources below
      }
    }
    for (const lane of lanes) {
      for (const it of emptyLane(lane)) {
        quietly(it.slot?.block);
        it.slot = undefined;
        it.settle(err);
        // The QPs are closed: nothing lands in the list's destinations any more.
        if (it.list !== undefined) it.list.busy = false;
      }
    }
    this.#smallSlots.drain((slot) => quietly(slot.block));
    this.#largeSlots.drain((slot) => quietly(slot.block));
    this.#items.drain(() => {});
    for (const op of this.#reads) quietly(op.dst);
    this.#reads.clear();
    for (const src of this.#sources.values()) {
      if (src.own) quietly(src.block);
      src.settle?.(err);
    }
    this.#sources.clear();
    this.#inFlight = 0;
    this.#sendCredits.destroy(err);
    this.#recvCredits.close();
    this.#creditClock.dispose();
    this.#res.close();
    const f = this.#idle;
    this.#idle = undefined;
    f?.();
  }

  #terminal(): boolean {
    return this.#state === 'closed' || this.#state === 'failed';
  }

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

  stats(): RdmaConnectionStats {
    let outstanding = 0;
    for (const l of this.#lanes) outstanding += l.sqUsed;
    outstanding += this.#readLane.sqUsed;
    const s = this.#stats;
    return {
      state: this.#state,
      channels: this.#open,
      messagesSent: s.messagesSent,
      bytesSent: s.bytesSent,
      messagesReceived: s.messagesReceived,
      bytesReceived: s.bytesReceived,
      sendStalls: s.sendStalls,
      sendWindowBytes: this.#window.bytesInFlight,
      receiveHeldBytes: this.#held,
      maxReceiveHeldBytes: this.#maxHeld,
      framesOut: s.framesOut,
      framesIn: s.framesIn,
      writes: s.posts,
      eagerSent: s.eagerSent,
      rendezvousSent: s.rendezvousSent,
      eagerReceived: s.eagerReceived,
      rendezvousReceived: s.rendezvousReceived,
      creditStalls: s.creditStalls,
      windowStalls: s.sendStalls,
      creditUpdates: s.creditUpdates,
      receiveCopies: s.receiveCopies,
      qps: this.#lanes.length,
      outstandingWrs: outstanding,
      rnrCount: s.rnrCount,
      posts: s.posts,
      repostRetries: s.repostRetries,
      reads: s.reads,
      readItems: s.readItems,
      readQpFailures: s.readQpFailures,
      recvLease: this.#terminal() ? 0 : this.#recvCredits.capacity,
      sendLease: this.#sendCredits.lease,
      polling: this.#poll.polled,
      pollTurns: this.#poll.turns,
      pollCatches: this.#poll.catches,
    };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Teardown releases what it can: a block its allocator already revoked stays gone. */
/** Every item queued or posted on `lane` (each once), which is left empty. */
function emptyLane(lane: Lane): Set<OutItem> {
  const items = new Set<OutItem>();
  for (let i = lane.head; i < lane.tail; i++) items.add(lane.fifo[i] as OutItem);
  for (let k = 0; k < lane.sqUsed; k++) {
    const it = lane.ringItems[(lane.ringHead + k) % lane.max];
    if (it !== undefined) items.add(it);
  }
  lane.fifo.length = 0;
  lane.head = 0;
  lane.tail = 0;
  lane.ringItems.fill(undefined);
  lane.ringHead = 0;
  lane.sqUsed = 0;
  return items;
}

/** What read() fails with once the read QP is in error (retryable on a new connection). */
function readFailure(what: string, cause: unknown): MuxError {
  return new MuxError('ERR_MUX_READ_FAILED', `${what}; reads need a new connection`, {
    cause,
    retryable: true,
  });
}

function quietly(b: Block | undefined): void {
  try {
    if (b !== undefined && !b.released) b.release();
  } catch {
    // revoked by a closed allocator
  }
}

/**
 * A block the peer may READ in place: a `remote-read` block of its own pool. Anything else
 * is copied: a `remote-read-write` block's key would also let the peer WRITE its arena, and
 * a block of the shared transport allocator's key would reach the whole shared arena.
 */
function readable(part: Block | BlockSlice, pool: RegisteredAllocator): boolean {
  const b = part instanceof BlockSlice ? part.block : part;
  return b.access === 'remote-read' && pool.owns(b);
}

function releaseParts(message: OutboundMessage): void {
  const parts = (Array.isArray(message) ? message : [message]) as readonly MessagePart[];
  for (const p of parts) {
    const b = p instanceof Uint8Array ? undefined : 'block' in p ? p.block : p;
    if (b !== undefined && !b.released) b.release();
  }
}
