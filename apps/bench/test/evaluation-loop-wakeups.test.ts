import { describe, expect, it } from 'vitest';
import { sumWakeups, wakeups } from '../src/stats/loopWakeups.js';

describe('evaluation: event-loop wake-ups of a row’s servers', () => {
  it.runIf(process.platform === 'linux')(
    'sums every process; one that cannot be read makes the sum unknown',
    async () => {
      const before = wakeups(process.pid) as number;
      expect(Number.isSafeInteger(before)).toBe(true);
      // Sleeping in the event loop is a voluntary switch of the main thread.
      for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 5));
      const sum = sumWakeups([process.pid, process.pid]) as number;
      expect(sum).toBeGreaterThan(2 * before);
      expect(sumWakeups([])).toBe(0);
      // Above any pid_max: no such process.
      expect(sumWakeups([process.pid, 2 ** 22 + 1])).toBeUndefined();
    },
  );
});
