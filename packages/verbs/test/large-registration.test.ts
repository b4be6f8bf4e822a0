// Issue 17 finding 1: a registration larger than the runtime can view (5 GiB on Node 20,
// whose ArrayBuffers stop at 4 GiB) once killed Node with "double free detected in tcache 2".
// Now it succeeds or fails with a typed, non-retryable ERR_RDMA_SYSTEM, and the device stays
// usable. Run in a child process: an abort fails the test instead of killing the runner.
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

interface Outcome {
  size: number;
  ok: boolean;
  typed?: boolean;
  code?: string;
  errno?: number;
  syscall?: string;
  retryable?: boolean;
}

describe('large registrations on soft', () => {
  it('allocMr past what an ArrayBuffer can view fails typed and leaves the device usable', async () => {
    const sizes = [2 ** 32 + 1, 5 * 2 ** 30];
    const r = await runIsolated<{ outcomes: Outcome[]; write: string; written: boolean }>(
      'large-registration.ts',
      sizes.map(String),
    );
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result?.outcomes).toHaveLength(sizes.length);
    for (const o of r.result?.outcomes ?? []) {
      if (o.ok) continue; // a runtime that can view it: registered and released
      expect(o).toMatchObject({ typed: true, code: 'ERR_RDMA_SYSTEM', retryable: false });
      expect(o.errno).toBeGreaterThan(0);
      expect(o.syscall).toBe('v8::ArrayBuffer::New');
    }
    expect(r.result).toMatchObject({ write: 'SUCCESS', written: true });
  });
});
