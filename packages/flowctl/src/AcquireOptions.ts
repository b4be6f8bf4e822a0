/**
 * Options of every awaitable acquire in this package (`SendCredits.acquire`, and with a
 * channel `SendWindow.acquire`). Every wait has a deadline: the object's default applies if
 * none is given. Named apart from verbs' `CompletionWaitOptions` and mux's `WaitOptions`.
 */
export interface AcquireOptions {
  /** Relative timeout in ms. */
  timeoutMs?: number;
  /** Absolute deadline on the object's clock (ms). The earlier of the two applies. */
  deadline?: number;
  /** Cancels the wait; the promise rejects with ERR_FLOWCTL_ABORTED. */
  signal?: AbortSignal;
}
