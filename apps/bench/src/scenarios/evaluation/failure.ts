import type { PsShardSet } from '../../peers/PsShardSet.js';
import type { Result } from '../../report/Result.js';
import { LatencyRecorder } from '../../stats/LatencyRecorder.js';
import { COUNTER_TABLE, type RdmajsPsTarget } from './PsTarget.js';

/** Pause of a pusher after a failed push (pushes fail only with recovery off). */
export const FAILED_PUSH_PAUSE_MS = 10;

export interface FailureOptions {
  /** Pushing before the kill, and after the shard is back, ms. */
  beforeMs: number;
  afterMs: number;
  /** Counter keys per push (spread over every shard). */
  keys: number;
  /** Pushes in flight at once. */
  concurrency: number;
}

/**
 * A shard SIGKILLed and restarted from its data directory during a stream of pushes. Every
 * push adds 1 to each of `keys` counter rows on every shard; afterwards the rows say how many
 * pushes were applied, which must equal the pushes the client saw acknowledged (none lost,
 * none applied twice). Recovery is measured two ways: kill → first push acknowledged again
 * (includes the process restart), and shard ready → first acknowledged push (what the
 * client's recovery itself costs).
 */
export async function runFailure(
  set: PsShardSet,
  target: RdmajsPsTarget,
  o: FailureOptions,
  progress: (label: string) => void,
): Promise<Result> {
  const keys = BigUint64Array.from({ length: o.keys }, (_, i) => BigInt(i + 1));
  const grads = new Float32Array(o.keys).fill(-1);
  const client = target.client;
  const rec = new LatencyRecorder();
  let acked = 0;
  let failed = 0;
  const ackTimes: number[] = [];
  let stop = false;
  const pusher = async () => {
    while (!stop) {
      const t0 = performance.now();
      try {
        await client.push(COUNTER_TABLE, keys, grads, { deadlineMs: 20_000 });
        const now = performance.now();
        rec.record((now - t0) * 1000);
        acked++;
        ackTimes.push(now);
      } catch {
        failed++;
        // Only without recovery do pushes fail: retry as an application would, not in a spin.
        await new Promise((r) => setTimeout(r, FAILED_PUSH_PAUSE_MS));
      }
    }
  };
  progress(`failure (${target.transport}): pushing`);
  const pushers = Array.from({ length: o.concurrency }, pusher);
  await new Promise((r) => setTimeout(r, o.beforeMs));
  const victim = 1 % set.shards.length;
  progress(
    `failure (${target.transport}): SIGKILL shard ${victim}, restart from its data directory`,
  );
  const killedAt = performance.now();
  await set.killAndRestart(victim);
  const readyAt = performance.now();
  await new Promise((r) => setTimeout(r, o.afterMs));
  stop = true;
  await Promise.all(pushers);
  // Every push needs every shard, so none is acknowledged while the victim is down.
  const ackBeforeKill = ackTimes.filter((t) => t < killedAt).pop() ?? killedAt;
  const firstAckAfterKill = ackTimes.find((t) => t >= readyAt) ?? 0;
  progress(`failure (${target.transport}): counting applied pushes`);
  using rows = await client.pull(COUNTER_TABLE, keys);
  let lost = 0;
  let duplicated = 0;
  let failedAppliedMin = Number.POSITIVE_INFINITY;
  let failedAppliedMax = 0;
  for (const v of rows.rows) {
    // Acknowledged pushes must all be there; a failed one may or may not have been applied.
    if (v < acked) lost = Math.max(lost, acked - v);
    if (v > acked + failed) duplicated = Math.max(duplicated, v - acked - failed);
    failedAppliedMin = Math.min(failedAppliedMin, Math.max(0, v - acked));
    failedAppliedMax = Math.max(failedAppliedMax, Math.max(0, v - acked));
  }
  return {
    transport: target.transport,
    op: target.variant === undefined ? 'push-shard-killed' : `push-shard-killed ${target.variant}`,
    baselineOp: 'push-shard-killed',
    sizeBytes: o.keys * 4,
    ...rec.summary(),
    cpuUsPerOp: Number.NaN,
    acked,
    failed,
    lost,
    duplicated,
    // Failed pushes applied anyway, fewest and most over the rows (shards): the caller cannot
    // tell which; min < max means some were applied on one shard and not on another.
    failedAppliedMin: rows.rows.length > 0 ? failedAppliedMin : 0,
    failedAppliedMax,
    recoveryMs: firstAckAfterKill > 0 ? firstAckAfterKill - killedAt : Number.NaN,
    restartMs: readyAt - killedAt,
    clientRecoveryMs: firstAckAfterKill > 0 ? Math.max(0, firstAckAfterKill - readyAt) : Number.NaN,
    stallMs: firstAckAfterKill > 0 ? firstAckAfterKill - ackBeforeKill : Number.NaN,
  };
}
