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

export interface Report {
  scenario: string;
  machine: MachineInfo;
  results: Result[];
  [extra: string]: unknown;
}
