import { expect } from 'vitest';
import { FlowctlError, type FlowctlErrorCode } from '../src/index.js';

/** Lets every pending promise reaction run (one macrotask turn; no timing involved). */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Asserts `fn` throws a FlowctlError with `code`. */
export function expectCode(fn: () => unknown, code: FlowctlErrorCode): void {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(FlowctlError);
  expect((thrown as FlowctlError).code).toBe(code);
}

/** Tracks how a promise settled, observable synchronously after `flush()`. */
export interface Tracked {
  state: 'pending' | 'resolved' | 'rejected';
  error: FlowctlError | undefined;
}

export function track(p: Promise<void>): Tracked {
  const t: Tracked = { state: 'pending', error: undefined };
  p.then(
    () => {
      t.state = 'resolved';
    },
    (err: FlowctlError) => {
      t.state = 'rejected';
      t.error = err;
    },
  );
  return t;
}
