/**
 * N senders → one slow receiver through one switch egress port, on virtual time.
 *
 * Time unit: microseconds. Each sender has a link of 10–50 Gb/s and a one-way delay of
 * 1–5 µs (seeded); the switch egress to the receiver runs at 100 Gb/s; the receiver's
 * application serves one message at a time, far slower than the link (≈ 1.6 GB/s).
 * Every sender starts with a burst backlog (the incast).
 *
 * Flow control, when on, is exactly the package: per-connection `SendCredits` /
 * `ReceiveCredits` in both directions (the receiver answers some messages, which carry
 * credits back piggybacked; otherwise explicit updates), and a per-sender `SendWindow`
 * released by the NIC-level acknowledgement. The knobs turn each mechanism off for the
 * ablation; nothing else changes.
 */
import { ReceiveCredits, SendCredits, SendWindow } from '../../src/index.js';
import { EventSimulator, jainIndex } from './EventSimulator.js';

export interface IncastConfig {
  senders: number;
  messagesPerSender: number;
  seed: number;
  /** Receive-credit flow control in both directions. */
  credits: boolean;
  /** Per-sender software send window. */
  window: boolean;
  /**
   * The receiver allocates a buffer for every arriving message instead of refusing it
   * (no overruns, but memory is no longer bounded). Only meaningful without credits.
   */
  elasticBuffers?: boolean;
  creditsPerSender?: number;
  windowBytes?: number;
  windowMessages?: number;
  minMessageBytes?: number;
  maxMessageBytes?: number;
  /** Fraction of messages the receiver answers (reverse traffic that piggybacks credits). */
  responseRatio?: number;
}

export interface IncastResult {
  readonly expected: number;
  /** Messages the receiver's application processed. */
  readonly delivered: number;
  /** Messages that found no posted receive buffer (RNR on a NIC), either direction. */
  readonly overruns: number;
  /** Largest number of receiver buffers holding unprocessed messages at once. */
  readonly maxReceiverBuffersInUse: number;
  readonly maxSwitchQueueBytes: number;
  readonly maxSwitchQueueMessages: number;
  /** Largest bytes one sender had unacknowledged in the network. */
  readonly maxSenderBytesInFlight: number;
  /** Jain's index of per-sender processed bytes while every sender was still backlogged. */
  readonly jain: number;
  readonly creditStalls: number;
  readonly windowStalls: number;
  readonly piggybackReturns: number;
  readonly explicitUpdates: number;
  /** True when the event queue emptied (no livelock within the event budget). */
  readonly quiesced: boolean;
  /** True when, at the end, every sender holds all its credits again (nothing leaked). */
  readonly creditsConserved: boolean;
  readonly finishTime: number;
  readonly events: number;
}

interface Msg {
  readonly kind: 'data' | 'update';
  readonly bytes: number;
  readonly credits: number;
}

interface Endpoint {
  readonly index: number;
  /** The receiver's end of connection `index` (else the sender's). */
  readonly atReceiver: boolean;
  readonly credits: SendCredits | null;
  readonly rc: ReceiveCredits;
  readonly window: SendWindow | null;
  readonly queue: number[];
  wantUpdate: boolean;
  /** Data bytes sent and not yet acknowledged by the peer's NIC. */
  unacked: number;
  transmit(msg: Msg): void;
}

const HEADER = 64;
const SWITCH_BYTES_PER_US = 12_500; // 100 Gb/s
const RECEIVER_BYTES_PER_US = 2_000; // application copy/handle rate
const RECEIVER_FIXED_US = 0.5;
const SWITCH_TO_RECEIVER_US = 1;

export function runIncast(cfg: IncastConfig): IncastResult {
  const n = cfg.senders;
  const perSender = cfg.messagesPerSender;
  const creditsPer = cfg.creditsPerSender ?? 8;
  const windowBytes = cfg.windowBytes ?? 16 * 1024;
  const windowMessages = cfg.windowMessages ?? 4;
  const minBytes = cfg.minMessageBytes ?? 1024;
  const maxBytes = cfg.maxMessageBytes ?? 8 * 1024;
  const responseRatio = cfg.responseRatio ?? 0.25;
  const elastic = cfg.elasticBuffers === true && !cfg.credits;

  const sim = new EventSimulator(cfg.seed);
  const rng = sim.rng;
  const clock = sim.asClock;

  let overruns = 0;
  let delivered = 0;
  let receiverInUse = 0;
  let maxInUse = 0;
  let maxSenderInFlight = 0;
  const processedBytes = new Array<number>(n).fill(0);
  const settled = new Array<number>(n).fill(0);
  let fairnessSnapshot: number[] | null = null;

  // ---- switch egress port toward the receiver ----
  const switchQueue: { size: number; deliver: () => void }[] = [];
  let switchHead = 0;
  let switchBusy = false;
  let switchBytes = 0;
  let maxSwitchBytes = 0;
  let maxSwitchMessages = 0;
  const switchStart = (): void => {
    const item = switchQueue[switchHead];
    if (item === undefined) {
      switchBusy = false;
      return;
    }
    switchBusy = true;
    sim.after(item.size / SWITCH_BYTES_PER_US, () => {
      switchQueue[switchHead++] = undefined as never;
      switchBytes -= item.size;
      sim.after(SWITCH_TO_RECEIVER_US, item.deliver);
      switchStart();
    });
  };
  const switchEnqueue = (size: number, deliver: () => void): void => {
    switchQueue.push({ size, deliver });
    switchBytes += size;
    if (switchBytes > maxSwitchBytes) maxSwitchBytes = switchBytes;
    const depth = switchQueue.length - switchHead;
    if (depth > maxSwitchMessages) maxSwitchMessages = depth;
    if (!switchBusy) switchStart();
  };

  // ---- receiver application: one server, FIFO ----
  const work: { ep: Endpoint; bytes: number }[] = [];
  let workHead = 0;
  let serverBusy = false;
  const serveNext = (): void => {
    const job = work[workHead];
    if (job === undefined) {
      serverBusy = false;
      return;
    }
    work[workHead++] = undefined as never;
    serverBusy = true;
    const service = (RECEIVER_FIXED_US + job.bytes / RECEIVER_BYTES_PER_US) * rng.real(0.8, 1.2);
    sim.after(service, () => {
      const i = job.ep.index;
      delivered++;
      processedBytes[i] = (processedBytes[i] as number) + job.bytes;
      settle(i);
      if (rng.next() < responseRatio) job.ep.queue.push(HEADER);
      releaseBuffer(job.ep);
      serveNext();
    });
  };

  const settle = (i: number): void => {
    settled[i] = (settled[i] as number) + 1;
    if (settled[i] === perSender && fairnessSnapshot === null) {
      fairnessSnapshot = processedBytes.slice();
    }
  };

  // ---- flow-control glue shared by both directions ----
  const trySend = (ep: Endpoint): void => {
    while (ep.queue.length > 0) {
      const bytes = ep.queue[0] as number;
      if (ep.credits !== null && ep.credits.usable === 0) {
        ep.credits.tryConsume(); // false: arms 'drain'
        break;
      }
      if (ep.window !== null && !ep.window.tryAcquire(bytes)) break;
      if (ep.credits !== null && !ep.credits.tryConsume()) {
        throw new Error('credit vanished between usable and tryConsume');
      }
      ep.queue.shift();
      if (!ep.atReceiver) {
        ep.unacked += bytes;
        if (ep.unacked > maxSenderInFlight) maxSenderInFlight = ep.unacked;
      }
      ep.transmit({
        kind: 'data',
        bytes,
        credits: ep.credits === null ? 0 : ep.rc.takePiggyback(),
      });
    }
    maybeUpdate(ep);
  };

  const maybeUpdate = (ep: Endpoint): void => {
    if (ep.credits === null || !ep.rc.updateNeeded) return;
    if (ep.credits.tryConsumeReserved()) {
      ep.wantUpdate = false;
      ep.transmit({ kind: 'update', bytes: 0, credits: ep.rc.takeUpdate() });
    } else {
      ep.wantUpdate = true;
    }
  };

  const releaseBuffer = (ep: Endpoint): void => {
    if (ep.atReceiver) receiverInUse--;
    if (!(elastic && ep.atReceiver)) ep.rc.release(1);
    trySend(ep);
  };

  /** A message from the peer reaches `ep`'s NIC. */
  const arrive = (ep: Endpoint, msg: Msg, onData: () => void): void => {
    if (!(elastic && ep.atReceiver) && !ep.rc.onReceive()) {
      overruns++;
      if (ep.atReceiver && msg.kind === 'data') settle(ep.index);
      return;
    }
    if (ep.atReceiver) {
      receiverInUse++;
      if (receiverInUse > maxInUse) maxInUse = receiverInUse;
    }
    if (ep.credits !== null && msg.credits > 0) {
      ep.credits.grant(msg.credits);
      if (ep.wantUpdate) maybeUpdate(ep);
    }
    if (msg.kind === 'update') releaseBuffer(ep);
    else onData();
  };

  // ---- endpoints ----
  const senderEps: Endpoint[] = [];
  const receiverEps: Endpoint[] = [];

  const makeEndpoint = (index: number, atReceiver: boolean, transmit: (m: Msg) => void) => {
    const ep: Endpoint = {
      index,
      atReceiver,
      credits: cfg.credits ? new SendCredits({ initialCredits: creditsPer, clock }) : null,
      rc: new ReceiveCredits({ initialCredits: creditsPer }),
      window:
        !atReceiver && cfg.window
          ? new SendWindow({ maxBytes: windowBytes, maxMessages: windowMessages, clock })
          : null,
      queue: [],
      wantUpdate: false,
      unacked: 0,
      transmit,
    };
    ep.credits?.on('drain', () => trySend(ep));
    ep.window?.on('drain', () => trySend(ep));
    return ep;
  };

  for (let i = 0; i < n; i++) {
    const rate = rng.real(1_250, 6_250); // 10–50 Gb/s in bytes/µs
    const oneWay = rng.real(1, 5);
    let nicFree = 0;
    // Declared before use by the closures below.
    const pair: { s?: Endpoint; r?: Endpoint } = {};
    const s = makeEndpoint(i, false, (msg) => {
      const size = msg.bytes + HEADER;
      const start = Math.max(sim.now, nicFree);
      nicFree = start + size / rate;
      sim.after(nicFree - sim.now + oneWay, () =>
        switchEnqueue(size, () => {
          const r = pair.r as Endpoint;
          arrive(r, msg, () => {
            work.push({ ep: r, bytes: msg.bytes });
            if (!serverBusy) serveNext();
          });
          // RC acknowledgement back to the sender releases the window (not the credit).
          if (msg.kind === 'data') {
            sim.after(oneWay + SWITCH_TO_RECEIVER_US, () => {
              s.unacked -= msg.bytes;
              s.window?.release(msg.bytes);
            });
          }
        }),
      );
    });
    const r = makeEndpoint(i, true, (msg) => {
      sim.after(oneWay + SWITCH_TO_RECEIVER_US + (msg.bytes + HEADER) / rate, () =>
        arrive(s, msg, () => releaseBuffer(s)),
      );
    });
    pair.s = s;
    pair.r = r;
    senderEps.push(s);
    receiverEps.push(r);
    for (let k = 0; k < perSender; k++) s.queue.push(rng.int(minBytes, maxBytes));
  }

  for (const s of senderEps) sim.after(0, () => trySend(s));
  const quiesced = sim.run({ maxEvents: 5_000_000 });

  let creditStalls = 0;
  let windowStalls = 0;
  let piggybackReturns = 0;
  let explicitUpdates = 0;
  let conserved = true;
  for (let i = 0; i < n; i++) {
    const s = senderEps[i] as Endpoint;
    const r = receiverEps[i] as Endpoint;
    for (const ep of [s, r]) {
      const rs = ep.rc.stats();
      piggybackReturns += rs.piggybackReturns;
      explicitUpdates += rs.explicitUpdates;
      if (ep.credits !== null) creditStalls += ep.credits.stats().creditStalls;
      if (ep.window !== null) windowStalls += ep.window.stats().windowStalls;
    }
    if (s.credits !== null && s.credits.available + r.rc.unreturned !== creditsPer) {
      conserved = false;
    }
    if (r.credits !== null && r.credits.available + s.rc.unreturned !== creditsPer) {
      conserved = false;
    }
  }

  return {
    expected: n * perSender,
    delivered,
    overruns,
    maxReceiverBuffersInUse: maxInUse,
    maxSwitchQueueBytes: maxSwitchBytes,
    maxSwitchQueueMessages: maxSwitchMessages,
    maxSenderBytesInFlight: maxSenderInFlight,
    jain: jainIndex(fairnessSnapshot ?? processedBytes),
    creditStalls,
    windowStalls,
    piggybackReturns,
    explicitUpdates,
    quiesced,
    creditsConserved: cfg.credits ? conserved : false,
    finishTime: sim.now,
    events: sim.eventsRun,
  };
}
