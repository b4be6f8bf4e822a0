import type { Result } from '../../report/Result.js';
import { div } from '../../report/summary.js';
import type { RdmaTargetOptions } from './PsTarget.js';
import { type RdmaTuning, serverArgsOf } from './RdmaTuning.js';
import { HEADLINE_CONCURRENCY } from './training.js';

/** One lesson of the paper turned off, measured against the full system. */
export interface Ablation {
  /** Short name; the ablated row's op ends in ` −name`. */
  name: string;
  /** The lesson (what the full system does). */
  lesson: string;
  /** What runs instead. */
  instead: string;
  /** The row it is measured on: fetch at the headline load, incast at the headline fan-in, or the shard kill. */
  measure: 'fetch' | 'incast' | 'failure';
  /** Further `rdmajs-ps-server` flags of the ablated shards; none: the main shards serve it. */
  serverArgs?: readonly string[];
  /** RDMA knobs of the ablated client and shards, over the run's own. */
  tuning?: RdmaTuning;
  /** How the ablated RDMA client differs. */
  client: Pick<RdmaTargetOptions, 'copyRows' | 'clients' | 'recovery' | 'oneSided'>;
}

export const ABLATIONS: readonly Ablation[] = [
  {
    name: 'zero-copy',
    lesson: 'zero-copy: replies built in registered allocator blocks, rows used in place',
    instead:
      'shards build replies on the heap and the transport copies each into a registered bounce buffer (--rdma-zero-copy off); the client copies the rows out (pullInto)',
    measure: 'fetch',
    serverArgs: ['--rdma-zero-copy', 'off'],
    client: { copyRows: true },
  },
  {
    name: 'one-sided',
    lesson:
      "one-sided fetches: the client READs rows (hash index window, seqlock meta, row) straight from the shard's registered table memory; the shard is never woken",
    instead:
      'two-sided pulls over RDMA (PsClient oneSidedReads: false): a request SEND wakes the shard, which gathers the rows and SENDs a reply',
    measure: 'fetch',
    client: { oneSided: false },
  },
  {
    name: 'qp-pool',
    lesson: 'QP multiplexing: every logical client shares one connection (QP pool, SRQ) per shard',
    instead: `a PsClient per incast client (${HEADLINE_CONCURRENCY}), so a connection with its own QP, CQ and lease of the transport's shared receive pool per client and shard, sharing one RdmaTransport`,
    measure: 'incast',
    // A connection per client and shard leases its own receive buffers from the transport's
    // shared pool (16 × 36 KiB idle, up to 256 × 36 KiB ≈ 9 MiB while busy): 64 × 3 busy
    // ones could need more than a transport's default 1 GiB of registered memory, so this
    // row's client and shards may register up to 4 GiB — the memory it reports is the
    // lesson's cost.
    tuning: { maxRegisteredBytes: 4 * 1024 * 1024 * 1024 },
    serverArgs: [],
    client: { clients: HEADLINE_CONCURRENCY },
  },
  {
    name: 'credits',
    lesson: 'receive credits: never SEND without a posted receive buffer (no RNR)',
    instead:
      "SENDs go without credits (client and shards: --rdma-ablate credits); a SEND that finds the shard's shared receive queue empty is RNR-NAKed and retried by the NIC every 0.64 ms, forever (rnrRetry 7); leases stay at 16 buffers per connection (nothing signals a busy sender), and the receiver copies nothing out to keep buffers posted",
    measure: 'incast',
    tuning: { ablations: ['credits'] },
    serverArgs: [],
    client: {},
  },
  {
    name: 'send-window',
    lesson: 'software send window: bounded bytes and messages in flight per connection and process',
    instead:
      'no send window and no shared budget on the client and the shards (--rdma-ablate send-window), and no side enforces the window it announced: what bounds data in flight is the receive credits and registered memory',
    measure: 'incast',
    tuning: { ablations: ['send-window'] },
    serverArgs: [],
    client: {},
  },
  {
    name: 'recovery',
    lesson:
      'recovery above the transport: sessions outlive connections, pushes are resent and de-duplicated',
    instead:
      'no reconnect inside an RPC session, one relink attempt, no resend: pushes in flight when the shard dies fail; the next push after it is back opens a new session',
    measure: 'failure',
    client: { recovery: false },
  },
];

/** The RDMA target of an ablation, on top of the run's tuning. */
export function ablatedTarget(a: Ablation, tuning: RdmaTuning): RdmaTargetOptions {
  return { ...a.client, tuning: { ...tuning, ...a.tuning }, variant: `−${a.name}` };
}

/** The flags of the ablated shards: the run's tuning, then the ablation's own. */
export function ablatedServerArgs(a: Ablation, tuning: RdmaTuning): string[] {
  return [...serverArgsOf({ ...tuning, ...a.tuning }), ...(a.serverArgs ?? [])];
}

/** Marks an ablated row with its lesson and its ratios against the reference row. */
export function compareWithReference(a: Ablation, row: Result, ref: Result): Result {
  return {
    ...row,
    ablation: a.name,
    lesson: a.lesson,
    instead: a.instead,
    referenceOp: ref.op,
    meanVsRef: div(row.meanUs, ref.meanUs),
    p99VsRef: div(row.p99Us, ref.p99Us),
    cpuVsRef: div(row.cpuUsPerOp, ref.cpuUsPerOp),
    // Fetch ablations probe both sides' closed-loop capacity: the throughput the lesson buys.
    ...(typeof row.capacityRps === 'number' && typeof ref.capacityRps === 'number'
      ? { capacityVsRef: div(row.capacityRps, ref.capacityRps) }
      : {}),
  };
}
