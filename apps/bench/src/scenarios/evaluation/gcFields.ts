import { addGc, type GcCounts, NO_GC, type ProcessGc } from '../../stats/GcCounts.js';

/** A row's GC figures: every process's, their totals, and the totals per request. */
export interface GcFields {
  /** Each process of the row (its client process, every server) over the measured window. */
  gc: ProcessGc[];
  /** Requests (or pushes) completed in that window: what the per-op figures divide by. */
  gcOps: number;
  /** Full (Mark-Compact) GCs of all those processes. */
  gcMajor: number;
  /** Young-generation GCs (Scavenge) of all those processes. */
  gcMinor: number;
  /** GC pause of all those processes, ms. */
  gcPauseMs: number;
  majorGcPerOp: number;
  minorGcPerOp: number;
  /** GC pause per request (or push), all processes, µs: comparable with `cpuUsPerOp`. */
  gcPauseUsPerOp: number;
}

/**
 * The GC fields of a row from its client process's GCs and its servers' (added up over the
 * row's rounds), for `ops` requests completed in that window.
 */
export function gcFields(
  client: GcCounts & { pid: number },
  servers: readonly ProcessGc[],
  ops: number,
): GcFields {
  const gc: ProcessGc[] = [
    {
      process: 'client',
      pid: client.pid,
      major: client.major,
      minor: client.minor,
      pauseMs: client.pauseMs,
    },
    ...servers,
  ];
  const t = gc.reduce<GcCounts>(addGc, NO_GC);
  const per = (x: number) => (ops > 0 ? x / ops : Number.NaN);
  return {
    gc,
    gcOps: ops,
    gcMajor: t.major,
    gcMinor: t.minor,
    gcPauseMs: t.pauseMs,
    majorGcPerOp: per(t.major),
    minorGcPerOp: per(t.minor),
    gcPauseUsPerOp: per(t.pauseMs * 1000),
  };
}
