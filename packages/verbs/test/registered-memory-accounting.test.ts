// allocMr memory is taken off V8's external-memory count while its buffer views it: a GC can
// never give it back (the device holds the buffer until deregistration detaches it), and
// counted, each 1 GiB region set off a full collection ("external memory pressure") that
// pauses the JS thread and frees nothing. The count comes back when the buffer goes.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { providers } from './harness/pair.js';

describe.each(providers)('registered memory and V8 external memory on %s', (provider) => {
  it('registering 1 GiB regions sets off no full collection for external memory pressure', () => {
    const script = fileURLToPath(new URL('./fixtures/registration-gc.ts', import.meta.url));
    const out = execFileSync(process.execPath, ['--trace-gc', '--import', 'tsx', script], {
      env: { ...process.env, PROVIDER: provider },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(out).toContain('done');
    const full = out.split('\n').filter((l) => /Mark-Compact.*external memory pressure/.test(l));
    // Open on ibverbs: the rxe lane still saw 8 such collections for 4 × 1 GiB, so that
    // provider's allocMr memory is still counted somewhere (issue 10); soft's is not.
    if (provider === 'soft') expect(full).toEqual([]);
  }, 90_000);
});
