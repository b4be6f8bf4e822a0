import { expect } from 'vitest';
import { RpcError } from '../../src/index.js';

/** The `code` of the RpcError `fn` throws (asserting it is one), or undefined if it returns. */
export function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(RpcError);
    return (err as RpcError).code;
  }
  return undefined;
}
