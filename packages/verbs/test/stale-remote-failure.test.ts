// Issue 9 (remoteFail checks the QP incarnation): a peer's access failure, decided against
// one connection of a QP, once moved the QP to ERR after it had been reset and reconnected —
// flushing the new connection's receives while the owner believed it RTS. Now a failure
// lands only on the incarnation its operation checked. The peer stops inside its operation
// by a fault hook (deterministic, no timing assumed: the owner waits until it is inside).
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

describe('remote failures on soft', () => {
  it('a failure decided against an earlier connection does not fail the current one', async () => {
    const r = await runIsolated<Record<string, unknown>>('stale-failure-owner.ts', [], 30_000);
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result).toEqual({
      wasInside: true,
      initiatorStatus: 10, // REM_ACCESS_ERR: the peer's own WR fails, as it should
      ownerState: 3, // still RTS
      ownerCompletions: [], // the receive posted after the reconnect is not flushed
      fatalEvents: 0,
    });
  });
});
