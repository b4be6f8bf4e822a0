import { MuxError } from './errors.js';

/**
 * Options of every wait in the contract (connect, send, receive, close). Every wait has a
 * deadline: when `timeoutMs` is not given the transport's default applies.
 */
export interface WaitOptions {
  /** Relative deadline in ms (0 = fail at once unless the result is ready). */
  timeoutMs?: number;
  /** Cancels the wait; it rejects with ERR_MUX_ABORTED, `cause` the signal's reason. */
  signal?: AbortSignal;
}

/** Resolves a wait's timeout (the default when none given); throws on bad input. */
export function timeoutOf(options: WaitOptions | undefined, fallback: number): number {
  const t = options?.timeoutMs;
  if (t === undefined) return fallback;
  if (typeof t !== 'number' || !(t >= 0) || t > 2_147_483_647) {
    throw new MuxError('ERR_MUX_INVALID_ARG', `timeoutMs must be 0 … 2^31-1 ms, got ${String(t)}`);
  }
  return t;
}

export function signalOf(options: WaitOptions | undefined): AbortSignal | undefined {
  const s = options?.signal;
  if (s !== undefined && !(s instanceof AbortSignal)) {
    throw new MuxError('ERR_MUX_INVALID_ARG', 'signal must be an AbortSignal');
  }
  return s;
}

/** Checks an integer option (for transports' option validation). */
export function checkInt(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new MuxError(
      'ERR_MUX_INVALID_ARG',
      `${name} must be an integer ${min} … ${max}, got ${String(v)}`,
    );
  }
  return v;
}
