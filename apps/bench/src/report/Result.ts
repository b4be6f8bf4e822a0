import type { MachineInfo } from '../machine.js';
import type { Summary } from './summary.js';

/** `machine`: a reference row of the host itself (no transport), e.g. its wake-up floor. */
export type Transport = 'soft' | 'ibverbs' | 'tcp' | 'grpc' | 'machine';

/** One measured row; every scenario keeps this shape and may add fields. */
export interface Result {
  transport: Transport;
  op: string;
  sizeBytes: number;
  p50Us: number;
  meanUs: number;
  p99Us: number;
  cpuUsPerOp: number;
  gibPerSec?: number;
  p999Us?: number;
  /** Latency at fixed percentiles (rows measured with a LatencyRecorder). */
  cdf?: { p: number; us: number }[];
  [extra: string]: unknown;
}

/** A one-way throughput row: `count` messages of `size` bytes in `seconds`, both sides' CPU. */
export function throughputResult(
  transport: Transport,
  op: string,
  size: number,
  count: number,
  seconds: number,
  cpuUs: number,
): Result {
  const perOpUs = (seconds * 1e6) / count;
  return {
    transport,
    op,
    sizeBytes: size,
    p50Us: perOpUs,
    meanUs: perOpUs,
    p99Us: perOpUs,
    cpuUsPerOp: cpuUs / count,
    gibPerSec: (size * count) / seconds / 2 ** 30,
  };
}

export interface Report {
  scenario: string;
  machine: MachineInfo;
  /** Every option the run used, defaults included. */
  config?: Record<string, unknown>;
  summary?: Summary;
  results: Result[];
  [extra: string]: unknown;
}
