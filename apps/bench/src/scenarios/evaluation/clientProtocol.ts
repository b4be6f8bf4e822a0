import type { GcCounts } from '../../stats/GcCounts.js';
import type { LatencySummary } from '../../stats/LatencyRecorder.js';
import type { RdmaTargetOptions, ShardAddress } from './PsTarget.js';

/** What a client process is started with (argv[2], JSON): whose client it runs. */
export type ClientProcessArgs =
  | {
      kind: 'rdmajs';
      side: 'tcp' | 'rdma';
      provider: 'soft' | 'ibverbs';
      servers: ShardAddress[];
      options: RdmaTargetOptions;
    }
  | { kind: 'grpc'; ports: number[] };

/** IPC requests from the bench to a client process (one reply each, matched by `id`). */
export type ClientProcessRequest =
  /** The request pools, sent once: fetch key batches, push key batches (+ keys per push). */
  | { op: 'workload'; fetch: BigUint64Array[]; push: BigUint64Array[] }
  /** Sequential pulls then pushes from the pools (JIT, connections), nothing measured. */
  | { op: 'warmup'; pulls: number; pushes: number }
  /** Pushes every distinct key of the fetch pool once (fetched rows then exist); replies the count. */
  | { op: 'fill' }
  /** Closed loop: `concurrency` pulls always in flight for `durationMs`. */
  | { op: 'capacity'; concurrency: number; durationMs: number }
  /**
   * One round of an open-loop fetch row, arrivals generated in the client process; `fresh`
   * starts a new row, else the round adds to the current one. Replies the row so far.
   */
  | {
      op: 'fetch';
      rate: number;
      durationMs: number;
      maxOutstanding: number;
      seed: number;
      fresh: boolean;
    }
  /** One round of an incast row (bursts `firstBurst` …), added to the current row unless `fresh`. */
  | {
      op: 'incast';
      concurrency: number;
      bursts: number;
      gapMs: number;
      firstBurst: number;
      fresh: boolean;
    }
  /** Memory and RDMA resources of this side. */
  | { op: 'info' }
  | { op: 'exit' };

/** What every measured row carries: the client process's own CPU over the row's rounds. */
interface RowCost {
  /** CPU (user + system, all threads) of the client process over the row's rounds, µs. */
  cpuUs: number;
  /** Resident memory of the client process at the row's end, bytes. */
  rssBytes: number;
  /** GCs of the client process over the row's rounds (the same window as `cpuUs`). */
  gc: GcCounts;
}

/** An open-loop fetch row so far, summarized in the client process (one message per round). */
export interface FetchRowReply extends RowCost {
  /** Issue → completion. */
  latency: LatencySummary;
  /** Scheduled arrival → completion (coordinated-omission corrected). */
  fromArrival: LatencySummary;
  /** Scheduled arrival → issue. */
  lag: LatencySummary;
  completed: number;
  dropped: number;
  failed: number;
  /** Time the row's rounds took (their sum). */
  seconds: number;
}

export interface IncastRowReply extends RowCost {
  latency: LatencySummary;
  /** Pushes acknowledged. */
  count: number;
  failed: number;
  busyMs: number;
  seconds: number;
}

export interface ClientInfoReply {
  rssBytes: number;
  registeredBytes?: number;
  qps?: number;
  /** Times the client transport's shared receive queue ran dry so far (mux's pool `emptied`). */
  receiveQueueEmptied?: number;
}
