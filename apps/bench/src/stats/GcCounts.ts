/**
 * Garbage collections of one process over some window: V8's full (Mark-Compact) and young
 * generation (Scavenge) collections, and the time every kind of GC paused JS for.
 */
export interface GcCounts {
  /** Full collections (Mark-Compact): the ones that pause for milliseconds. */
  major: number;
  /** Young-generation collections (Scavenge). */
  minor: number;
  /** Pause of every GC kind (incremental marking steps and weak callbacks too), ms. */
  pauseMs: number;
}

/** The GCs of one named process (a client process, a shard, a gRPC server). */
export type ProcessGc = GcCounts & {
  /** `client`, `shard e0`, `grpc server 1` … */
  process: string;
  pid: number;
};

export const NO_GC: Readonly<GcCounts> = Object.freeze({ major: 0, minor: 0, pauseMs: 0 });

/**
 * Whether `x` (another process's answer) is a GcCounts: whole counts and a finite pause,
 * none negative.
 */
export function isGcCounts(x: unknown): x is GcCounts {
  const g = x as GcCounts;
  return (
    typeof g === 'object' &&
    g !== null &&
    Number.isSafeInteger(g.major) &&
    g.major >= 0 &&
    Number.isSafeInteger(g.minor) &&
    g.minor >= 0 &&
    typeof g.pauseMs === 'number' &&
    Number.isFinite(g.pauseMs) &&
    g.pauseMs >= 0
  );
}

export function addGc(a: GcCounts, b: GcCounts): GcCounts {
  return { major: a.major + b.major, minor: a.minor + b.minor, pauseMs: a.pauseMs + b.pauseMs };
}

/** `after − before` of one process's running totals (never below zero: a restart counts from 0). */
export function gcSince(after: GcCounts, before: GcCounts): GcCounts {
  if (after.major < before.major || after.minor < before.minor) return { ...after };
  return {
    major: after.major - before.major,
    minor: after.minor - before.minor,
    pauseMs: Math.max(0, after.pauseMs - before.pauseMs),
  };
}

/**
 * Per-process GCs between two readings of the same processes' running totals, matched by
 * pid. Only processes in both readings count: one missing from `before` may be a restart or a
 * reading that timed out on a loaded host (counted from zero, its whole life would land in
 * this window); one gone from `after` was killed. Their GCs in the window are lost, never
 * misattributed.
 */
export function gcBetween(before: readonly ProcessGc[], after: readonly ProcessGc[]): ProcessGc[] {
  const out: ProcessGc[] = [];
  for (const a of after) {
    const b = before.find((x) => x.pid === a.pid);
    if (b !== undefined) out.push({ process: a.process, pid: a.pid, ...gcSince(a, b) });
  }
  return out;
}

/** Adds `more` into `into`, process by process (matched by name: rounds of one row). */
export function addProcessGc(into: ProcessGc[], more: readonly ProcessGc[]): ProcessGc[] {
  for (const m of more) {
    const i = into.findIndex((x) => x.process === m.process);
    if (i < 0) into.push({ ...m });
    else into[i] = { process: m.process, pid: m.pid, ...addGc(into[i] as ProcessGc, m) };
  }
  return into;
}
