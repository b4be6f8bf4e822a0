/**
 * The paper's production figures (its RDMA system against its kernel-TCP one) and the
 * targets issue 15 sets for the soft provider. Printed and drawn beside our ratios and
 * always labelled as the paper's: they were measured on its cluster, not here.
 */
export interface HeadlineFigure {
  key: HeadlineKey;
  label: string;
  /** The paper's production ratio (RDMA ÷ TCP), or undefined where it gives none. */
  paper: number | undefined;
  /** The paper's figure as it states it. */
  paperText: string;
  /** Our target on the soft provider: the ratio must be at most this. */
  target: number;
  /** Exactly which rows the ratio divides (also in the JSON's `summary.definitions`). */
  definition: string;
}

export type HeadlineKey =
  | 'fetchMeanRatio'
  | 'fetchP99Ratio'
  | 'fetchCpuRatio'
  | 'pushP99Ratio'
  | 'grpcFetchMeanRatio';

export const HEADLINES: readonly HeadlineFigure[] = [
  {
    key: 'fetchMeanRatio',
    label: 'fetch mean, RDMA ÷ TCP',
    paper: 1 - 0.357,
    paperText: '−35.7 %',
    target: 0.5,
    definition:
      "mean fetch latency (issue → rows), RDMA ÷ TCP, both at the same offered load: 50 % of the TCP target's closed-loop capacity (rows fetch@50%)",
  },
  {
    key: 'fetchP99Ratio',
    label: 'fetch p99, RDMA ÷ TCP',
    paper: 1 - 0.437,
    paperText: '−43.7 %',
    target: 0.4,
    definition: 'p99 fetch latency (issue → rows), RDMA ÷ TCP, rows fetch@50% (as fetchMeanRatio)',
  },
  {
    key: 'fetchCpuRatio',
    label: 'CPU per fetch, RDMA ÷ TCP',
    paper: 1 - 0.1069,
    paperText: '−10.69 %',
    target: 0.7,
    definition: 'CPU per fetch of the client and every shard, RDMA ÷ TCP, rows fetch@50%',
  },
  {
    key: 'pushP99Ratio',
    label: 'incast push p99, RDMA ÷ TCP',
    paper: 1 - 0.74,
    paperText: '−74 %',
    target: 0.25,
    definition:
      'p99 push latency (burst start → acknowledged), RDMA ÷ TCP, 64 clients pushing at once (rows push-incast×64)',
  },
  {
    key: 'grpcFetchMeanRatio',
    label: 'fetch mean, RDMA ÷ gRPC',
    paper: undefined,
    paperText: '(not in the paper)',
    target: 0.05,
    definition:
      "mean fetch latency (issue → rows), RDMA ÷ gRPC, both offered 50 % of the gRPC target's closed-loop capacity (rows fetch@50%grpc): the same request rate, gRPC busy but not saturated. At 50 % of TCP's capacity gRPC is past its own and its latency is queueing: that ratio is grpcFetchMeanRatioSameLoad",
  },
];

/**
 * A secondary gRPC figure (`summary.grpcFetchMeanRatioSameLoad`): RDMA ÷ gRPC at 50 % of TCP's
 * capacity, where gRPC is past its own capacity. Shown beside the headlines, with no target.
 */
export const GRPC_SAME_LOAD = {
  label: "fetch mean, RDMA ÷ gRPC at 50 % of TCP's capacity",
  why: 'gRPC past its own capacity there: its latency is queueing, not transport (not in the paper)',
  definition:
    "mean fetch latency (issue → rows), RDMA ÷ gRPC, both at 50 % of the TCP target's closed-loop capacity (rows fetch@50%): the same request rate, at which gRPC is usually saturated, so its latency is mostly queueing",
} as const;
