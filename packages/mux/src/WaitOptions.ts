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
