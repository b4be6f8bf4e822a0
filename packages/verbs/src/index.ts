export {
  CompletionQueue,
  type CompletionWaitOptions,
  type CqAsyncEvent,
  NOTIFY_SOLICITED_ONLY,
  type NotifyOptions,
} from './CompletionQueue.js';
export {
  Device,
  type DeviceAsyncEvent,
  type IbvStatus,
  ibverbsStatus,
  type ListenOptions,
  listDevices,
  type OpenDeviceOptions,
  openDevice,
} from './Device.js';
export {
  errnoName,
  RdmaCompletionError,
  RdmaError,
  type RdmaErrorCode,
  type RdmaErrorOptions,
  RdmaPostError,
  RdmaSystemError,
} from './errors.js';
export {
  formatIbverbsEndpoint,
  type IbvEndpointFields,
  ibverbsEndpoint,
  parseIbverbsEndpoint,
} from './IbvEndpoint.js';
export { MemoryRegion } from './MemoryRegion.js';
export { type CreateQpOptions, ProtectionDomain } from './ProtectionDomain.js';
export {
  DEAD_PEER_BOUND_MS,
  DEFAULT_RETRY_COUNT,
  DEFAULT_TIMEOUT,
  type QpAsyncEvent,
  QueuePair,
} from './QueuePair.js';
export { MAX_SEND_WR_LIST, SendWrList } from './SendWrList.js';
export { SharedReceiveQueue, type SrqAsyncEvent } from './SharedReceiveQueue.js';
export {
  Access,
  type ConnectOptions,
  type DeviceInfo,
  type DeviceLimits,
  type Endpoint,
  type IbvEndpoint,
  type LinkAddress,
  type LinkListener,
  type PortInfo,
  type ProviderName,
  type QpCaps,
  type QpState,
  type RecvWr,
  type RouteOptions,
  type SendOpcode,
  type SendWr,
  type Sge,
  type SoftEndpoint,
  WC_STATUSES,
  type WcOpcode,
  type WcStatus,
  type WorkCompletion,
} from './types.js';
export { allocCompletions, isRetryableStatus } from './WorkCompletions.js';
