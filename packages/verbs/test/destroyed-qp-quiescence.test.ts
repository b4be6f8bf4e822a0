// Issue 9 (queues freed without quiescence): destroyQp freed the QP's receive queue at once
// and its slot was reused at once, while an initiator that had passed its checks could still
// take a receive from the queue and complete into it. Now destroy waits (bounded) for peers
// inside the QP; past the bound the queue is quarantined and the slot is not reused until
// they leave, so a late SEND never reaches the next QP. Deterministic (fault hook 6).
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

describe('destroyQp on soft', () => {
  it('a peer inside a destroyed QP never reaches the QP created after it', async () => {
    const r = await runIsolated<Record<string, unknown>>('destroyed-qp-owner.ts', [], 30_000);
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result).toMatchObject({
      wasInside: true,
      sameSlot: false, // the slot waits for the peer to leave
      ownerCompletions: [], // the new QP's receive was not taken (also guarded by the incarnation check)
      quarantined: true,
    });
    // The late SEND itself ends as a vanished responder would have it end.
    expect([12 /* RETRY_EXC_ERR */, -1 /* still retrying */]).toContain(r.result?.initiatorStatus);
  });
});
