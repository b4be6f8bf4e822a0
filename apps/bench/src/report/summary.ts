import { baselineFor } from './baselineRow.js';
import { GRPC_SAME_LOAD, HEADLINES, type HeadlineKey } from './paper.js';
import type { Result } from './Result.js';

/** One RDMA row against the TCP row of the same size and kind, measured in the same run. */
export interface RowRatio {
  transport: string;
  op: string;
  sizeBytes: number;
  p50Ratio: number;
  meanRatio: number;
  p99Ratio: number;
  cpuRatio: number;
}

/**
 * The JSON's `summary`: the headline ratios, null until the scenario that
 * measures them exists (the inference-fetch and training-push scenarios need the PS
 * service and client, issue 14), and every ratio the scenarios that exist do measure.
 */
/** What a scenario measures of the headlines, and the figure reported beside them. */
export type HeadlineValues = Partial<Record<HeadlineKey, number>> & {
  grpcFetchMeanRatioSameLoad?: number;
};

export type Summary = Record<HeadlineKey, number | null> & {
  /** RDMA ÷ gRPC fetch mean at the same offered rate (50 % of TCP's capacity); evaluation only. */
  grpcFetchMeanRatioSameLoad?: number | null;
  /** What each headline ratio divides, in words. */
  definitions: Record<string, string>;
  ratios: RowRatio[];
};

/** a ÷ b, NaN where the ratio means nothing (no baseline, or a value not measured). */
export const div = (a: number, b: number) => (b > 0 && Number.isFinite(a) ? a / b : Number.NaN);

export function summarize(results: Result[]): Summary {
  const ratios: RowRatio[] = [];
  for (const r of results) {
    const b = baselineFor(r, results);
    if (!b) continue;
    ratios.push({
      transport: r.transport,
      op: r.op,
      sizeBytes: r.sizeBytes,
      p50Ratio: div(r.p50Us, b.p50Us),
      meanRatio: div(r.meanUs, b.meanUs),
      p99Ratio: div(r.p99Us, b.p99Us),
      cpuRatio: div(r.cpuUsPerOp, b.cpuUsPerOp),
    });
  }
  return {
    fetchMeanRatio: null,
    fetchP99Ratio: null,
    fetchCpuRatio: null,
    pushP99Ratio: null,
    grpcFetchMeanRatio: null,
    definitions: {
      ...Object.fromEntries(HEADLINES.map((h) => [h.key, h.definition])),
      grpcFetchMeanRatioSameLoad: GRPC_SAME_LOAD.definition,
    },
    ratios,
  };
}
