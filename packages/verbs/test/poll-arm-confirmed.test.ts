// A poll that arms the CQ in its own crossing (loop-fed soft CQs) must say whether it left
// the CQ armed: when it did not (POLL_NOT_ARMED: the arm found completions but the CQ lock
// was held by a stopped peer), the next wait arms itself instead of sleeping until its
// timeout on an arm that is not set. Driven through a scripted native device.
import { describe, expect, it } from 'vitest';
import { allocCompletions, CompletionQueue } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { Resource } from '../src/internal/lifecycle.js';
import type { NativeDevice } from '../src/internal/native.js';
import { kCreate, kLoopFed, kUse } from '../src/internal/symbols.js';

class Parent extends Resource {
  // biome-ignore lint/complexity/noUselessConstructor: makes Resource's protected constructor public
  constructor() {
    super();
  }
  protected override kind() {
    return 'device' as const;
  }
  protected override release(): void {}
}

/** A native device whose pollCq answers `pollAnswer` and whose armCq finds one there. */
function scripted() {
  const calls = { arm: 0, pollArmArg: [] as number[] };
  let pollAnswer = 0;
  const native = {
    cqCapacity: () => 16,
    pollCq: (_h: number, _o: Float64Array, _m: number, arm?: number) => {
      calls.pollArmArg.push(arm ?? 0);
      return pollAnswer;
    },
    armCq: () => {
      calls.arm++;
      return 1;
    },
    cqCount: () => 0,
    destroyCq: () => undefined,
  } as unknown as NativeDevice;
  return { native, calls, answer: (n: number) => (pollAnswer = n) };
}

describe('a poll that arms reports whether it did', () => {
  it('after POLL_NOT_ARMED the next wait arms; after a confirmed arm (0) it does not', async () => {
    const { native, calls, answer } = scripted();
    const cq = new CompletionQueue(kCreate, new Parent(), native, 1, new Map());
    cq[kUse](1);
    cq[kLoopFed](1);
    const wcs = allocCompletions(4);
    // An empty poll, then a wait: the CQ's habit is now poll-then-wait, so polls arm.
    expect(cq.poll(wcs)).toBe(0);
    await cq.waitForCompletion({ timeoutMs: 1000 });
    expect(calls.arm).toBe(1);

    answer(ABI.POLL_NOT_ARMED);
    expect(cq.poll(wcs)).toBe(0); // none taken: never a negative count
    expect(calls.pollArmArg.at(-1)).toBe(1);
    await cq.waitForCompletion({ timeoutMs: 1000 }); // arms itself (armCq finds one)
    expect(calls.arm).toBe(2);

    answer(0); // armed by the poll: the wait needs no arm of its own
    expect(cq.poll(wcs)).toBe(0);
    expect(calls.pollArmArg.at(-1)).toBe(1);
    await expect(cq.waitForCompletion({ timeoutMs: 20 })).rejects.toMatchObject({
      code: 'ERR_RDMA_TIMEOUT',
    });
    expect(calls.arm).toBe(2);
  });
});
