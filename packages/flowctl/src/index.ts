export type { AcquireOptions } from './AcquireOptions.js';
export { type Clock, systemClock } from './Clock.js';
export {
  FlowctlAbortError,
  FlowctlClosedError,
  FlowctlDeadlineError,
  FlowctlError,
  type FlowctlErrorCode,
  type FlowctlErrorOptions,
} from './errors.js';
export { ManualClock } from './ManualClock.js';
export {
  type AgreedFlow,
  defaultFlowParams,
  FLOW_PARAMS_VERSION,
  type FlowParams,
  negotiateFlow,
  parseFlowParams,
} from './Negotiation.js';
export {
  type CreditParams,
  ReceiveCredits,
  type ReceiveCreditsOptions,
  type ReceiveCreditsState,
  type ReceiveCreditsStats,
} from './ReceiveCredits.js';
export {
  SendCredits,
  type SendCreditsOptions,
  type SendCreditsState,
  type SendCreditsStats,
} from './SendCredits.js';
export {
  type SendWaitOptions,
  SendWindow,
  type SendWindowOptions,
  type SendWindowState,
  type SendWindowStats,
} from './SendWindow.js';
export { SharedBudget, type SharedBudgetOptions, type SharedBudgetStats } from './SharedBudget.js';
