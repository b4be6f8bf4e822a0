import type { Result } from './Result.js';

/** The TCP row an RDMA row compares with: same size; same op, or any TCP op of that kind. */
export function baselineFor(r: Result, rows: Result[]): Result | undefined {
  if (r.transport === 'tcp') return undefined;
  // A row may name its TCP counterpart (mux over RDMA compares with mux over TCP).
  if (typeof r.baselineOp === 'string') {
    return rows.find(
      (t) => t.transport === 'tcp' && t.sizeBytes === r.sizeBytes && t.op === r.baselineOp,
    );
  }
  const kind = r.op.includes('throughput') ? 'throughput' : 'pingpong';
  return rows.find(
    (t) => t.transport === 'tcp' && t.sizeBytes === r.sizeBytes && t.op.includes(kind),
  );
}
