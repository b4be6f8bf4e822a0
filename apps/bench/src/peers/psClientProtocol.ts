/** What the ps client peer is started with (argv[2], JSON). */
export interface PsClientPeerArgs {
  side: 'tcp' | 'rdma';
  servers: { host: string; port: number; id: string }[];
  secret: string;
  provider: 'soft' | 'ibverbs';
  /** The RDMA eager threshold (unset: mux's default). */
  eagerThreshold?: number;
}

/** One block of calls of a row: `n` calls, the k-th sending key batch `from + k`. */
export interface PsBlockRequest {
  call: 'pull' | 'push';
  dim: number;
  /** Keys per call. */
  batch: number;
  /** The row's key-batch seed (`keyBatches(batch, seed)`). */
  seed: number;
  from: number;
  n: number;
  /** False for warm-up blocks: no latencies are sent back. */
  measure: boolean;
}

/** IPC requests from the bench to a ps client peer (one reply each, matched by `id`). */
export type PsClientPeerRequest =
  /** `calls` 16-key pulls and pushes, cycling through `dims` (JIT, connections, first rows). */
  | { op: 'warmup'; calls: number; dims: number[] }
  | ({ op: 'block' } & PsBlockRequest)
  | { op: 'exit' };

/** A block's result: one small message per block, never one per call. */
export interface PsBlockResult {
  /** Round trip of each call, µs (empty for warm-up blocks). */
  latenciesUs: Float64Array;
  /** CPU time (user + system, all threads) of the peer process over the block, µs. */
  cpuUs: number;
}
