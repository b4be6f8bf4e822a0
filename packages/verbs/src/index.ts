export { CompletionQueue, type CqAsyncEvent, type WaitOptions } from './CompletionQueue.js';
export {
  Device,
  type DeviceAsyncEvent,
  ibverbsStatus,
  listDevices,
  type OpenDeviceOptions,
  openDevice,
} from './Device.js';
export { RdmaCompletionError, RdmaError, type RdmaErrorCode, RdmaSystemError } from './errors.js';
export { MemoryRegion } from './MemoryRegion.js';
export { type CreateQpOptions, ProtectionDomain } from './ProtectionDomain.js';
export { type Fault, type QpAsyncEvent, QueuePair } from './QueuePair.js';
export { SharedReceiveQueue } from './SharedReceiveQueue.js';
export {
  Access,
  type ConnectOptions,
  type DeviceInfo,
  type DeviceLimits,
  type Endpoint,
  type PortInfo,
  type ProviderName,
  type QpCaps,
  type QpState,
  type RecvWr,
  type SendOpcode,
  type SendWr,
  type Sge,
  WC_STATUSES,
  type WcOpcode,
  type WcStatus,
  type WorkCompletion,
} from './types.js';
export { allocCompletions, isRetryableStatus } from './WorkCompletions.js';
