// allocMr memory is not counted as V8 external memory: a GC can never give it back (the
// device holds the buffer until deregistration detaches it), and counted, each 1 GiB region
// set off a full collection that paused the JS thread and freed nothing. How V8 starts it
// depends on the heap limit: at once ("Mark-Compact (reduce) … external memory pressure")
// when the limit is small (the rxe lane's 3 GiB VM: 8 for 4 × 1 GiB), else as incremental
// marking started for "external memory pressure" and finalized later. Both are counted, with
// a small heap (as in that VM) and with the default one, on every provider.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { providers } from './harness/pair.js';

const script = fileURLToPath(new URL('./fixtures/registration-gc.ts', import.meta.url));

const heaps: [string, string[]][] = [
  ['a small heap limit (512 MiB)', ['--max-old-space-size=512']],
  ['the default heap limit', []],
];

describe.each(providers)('registered memory and V8 external memory on %s', (provider) => {
  // ibverbs runs in the rxe lane's 3 GiB VM, whose default limit is the small one, and where
  // registering (pinning) 4 GiB under emulation takes about a minute: once is enough there.
  it.each(provider === 'ibverbs' ? heaps.slice(1) : heaps)(
    'registering 1 GiB regions sets off no collection for external memory pressure with %s',
    (_, heap) => {
      const out = execFileSync(
        process.execPath,
        [...heap, '--trace-gc', '--trace-incremental-marking', '--import', 'tsx', script],
        { env: { ...process.env, PROVIDER: provider }, encoding: 'utf8', timeout: 240_000 },
      );
      expect(out).toContain('done');
      const started = out.split('\n').filter((l) => /external memory pressure/.test(l));
      expect(started).toEqual([]);
    },
    270_000,
  );
});
