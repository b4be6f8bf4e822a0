import type { MachineInfo } from '../machine.js';

export type Transport = 'soft' | 'ibverbs' | 'tcp';

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
  results: Result[];
  [extra: string]: unknown;
}
