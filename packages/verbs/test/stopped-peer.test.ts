// Issue 9 (liveness): stopped_peer_does_not_freeze_owner. A peer process stopped while it
// holds a lock in this device's shared segment once froze the owner's JS thread for good
// (the inter-process spin lock waited forever; the holder's pid was alive). Now a lock not
// obtained within a bound is a typed, retryable failure of that one call, the owner's other
// QPs keep working, and a reset gives the QP a fresh queue. The owner runs in a child
// process, so a freeze fails the test (by its deadline) instead of hanging the runner.
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

describe('a stopped peer on soft', () => {
  it('stopped_peer_does_not_freeze_owner', async () => {
    const r = await runIsolated<Record<string, unknown>>('stopped-peer-owner.ts', [], 30_000);
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    const held = r.result?.['postRecv on the QP whose queue the stopped peer holds'] as {
      code?: string;
    };
    // Refused as a whole: the queue is busy (native POST_BUSY), try again later.
    expect(held?.code).toBe('ERR_RDMA_BUSY');
    expect(r.result).toMatchObject({
      'poll of the CQ': { returned: 0 },
      'other peer SEND': { recv: 'SUCCESS', sent: 'SUCCESS' },
      'reset of the QP whose queue the stopped peer holds': { returned: null },
      'postRecv after the reset': { returned: null },
    });
  });
});
