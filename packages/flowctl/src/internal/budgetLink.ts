/**
 * The private link between a SendWindow and its SharedBudget. Symbol-keyed methods keep
 * it out of the public API; neither class imports the other's implementation.
 */
export const kSelectedBytes: unique symbol = Symbol('flowctl.selectedBytes');
export const kDispatchSelected: unique symbol = Symbol('flowctl.dispatchSelected');
export const kMaybeDrain: unique symbol = Symbol('flowctl.maybeDrain');

export const kAdmit: unique symbol = Symbol('flowctl.admit');
export const kFits: unique symbol = Symbol('flowctl.fits');
export const kTake: unique symbol = Symbol('flowctl.take');
export const kGive: unique symbol = Symbol('flowctl.give');
export const kEnqueue: unique symbol = Symbol('flowctl.enqueue');
export const kWantDrain: unique symbol = Symbol('flowctl.wantDrain');
export const kDetach: unique symbol = Symbol('flowctl.detach');
export const kPump: unique symbol = Symbol('flowctl.pump');

/** What a budget needs from a window. */
export interface BudgetClient {
  /** Bytes of the waiter the window would dispatch next, or -1 if none fits its own window. */
  [kSelectedBytes](): number;
  /** Dispatches that waiter (taking window and budget space). */
  [kDispatchSelected](): void;
  /** Emits 'drain' if a refused tryAcquire could now succeed. True when it did or no longer needs to. */
  [kMaybeDrain](): boolean;
}

/** What a window needs from its budget. */
export interface BudgetLink {
  readonly maxBytes: number;
  /** True when `bytes` fit now and no window is queued on the budget. */
  [kAdmit](bytes: number): boolean;
  /** True when `bytes` fit now, ignoring queued windows. */
  [kFits](bytes: number): boolean;
  [kTake](bytes: number): void;
  [kGive](bytes: number, messages: number): void;
  [kEnqueue](client: BudgetClient): void;
  [kWantDrain](client: BudgetClient): void;
  [kDetach](client: BudgetClient): void;
  /** Re-evaluates the queued windows (one of them withdrew a send). */
  [kPump](): void;
}
