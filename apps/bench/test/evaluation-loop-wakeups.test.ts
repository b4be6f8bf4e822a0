import { describe, expect, it } from 'vitest';
import {
  parseVoluntarySwitches,
  procLoopWakeups,
  sumLoopWakeups,
} from '../src/scenarios/evaluation/loopWakeups.js';

describe('evaluation: event-loop wake-ups from /proc', () => {
  it('reads voluntary_ctxt_switches, not the non-voluntary line', () => {
    const status = [
      'Name:\tnode',
      'Threads:\t11',
      'voluntary_ctxt_switches:\t1234',
      'nonvoluntary_ctxt_switches:\t56',
    ].join('\n');
    expect(parseVoluntarySwitches(status)).toBe(1234);
    expect(parseVoluntarySwitches('nonvoluntary_ctxt_switches:\t56\n')).toBeUndefined();
    expect(parseVoluntarySwitches('')).toBeUndefined();
  });

  it.runIf(process.platform === 'linux')(
    'counts this process and sums several; a gone pid is unknown',
    async () => {
      const before = procLoopWakeups(process.pid) as number;
      expect(Number.isSafeInteger(before)).toBe(true);
      // Sleeping in the event loop is a voluntary switch of the main thread.
      for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 5));
      expect(procLoopWakeups(process.pid) as number).toBeGreaterThan(before);
      expect(sumLoopWakeups([process.pid, process.pid])).toBeGreaterThanOrEqual(2 * before);
      expect(procLoopWakeups(2 ** 22 + 1)).toBeUndefined();
      expect(sumLoopWakeups([process.pid, 2 ** 22 + 1])).toBeUndefined();
    },
  );
});
