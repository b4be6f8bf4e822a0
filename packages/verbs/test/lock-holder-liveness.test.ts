// A queue lock in a shared segment is given up only when its holder cannot let go. On a
// loaded host a peer preempted inside its few-instruction section held one past the 20 ms
// budget, and the post that gave up failed a mux connection (`receive repost failed`). Now
// a waiter past its budget looks at the holder: one that runs is waited for (bounded by
// the 1 s hard cap: past it the call gives up too), a stopped one makes the call a typed
// retryable ERR_RDMA_BUSY, a dead one's lock is taken over. The owner runs in a child
// process, so a freeze fails the test by its deadline instead of hanging the runner.
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

describe('a peer holding a queue lock on soft', () => {
  it('waits_for_a_running_holder_up_to_the_cap_gives_up_on_a_stopped_one_takes_over_from_a_dead_one', async () => {
    const r = await runIsolated<Record<string, unknown>>('lock-wait-owner.ts', [], 60_000);
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result).toEqual({
      'post while a running peer holds the queue past the budget': { posted: 1 },
      'post while a running peer keeps the queue past the hard cap': { code: 'ERR_RDMA_BUSY' },
      'post while the holder is stopped': { code: 'ERR_RDMA_BUSY' },
      'post after the holder died': { posted: 4 },
      // wrIds 2 and 3 were refused as a whole: never on the queue.
      flushed: [1, 4],
    });
  });
});
