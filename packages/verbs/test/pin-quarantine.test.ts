// Issue 9 (use-after-free of registered memory): deregistration once waited 1 s on the JS
// thread for a peer's copy and then unmapped the region anyway. Now it waits a short bound;
// a pin that outlives it quarantines the memory (detached from JS, still mapped, counted in
// stats()) until the pin drains, and it is given back then.
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

describe('pinned memory on soft', () => {
  it('a copy that outlives deregistration quarantines the region until it ends', async () => {
    const r =
      await runIsolated<Record<string, Record<string, number> | boolean>>('pin-quarantine.ts');
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result).toMatchObject({
      before: { quarantinedRegions: 0, quarantinedBytes: 0 },
      deregReturned: true,
      detached: true,
      held: { quarantinedRegions: 1, quarantinedBytes: 4096 },
      after: { quarantinedRegions: 0, quarantinedBytes: 0 },
    });
  });
});
