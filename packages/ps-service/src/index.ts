export { PsServiceError, type PsServiceErrorCode } from './errors.js';
export { jsonLogger, type Logger, type LogLevel, silentLogger } from './Logger.js';
export {
  type ListenerInfo,
  type ListenSpec,
  PsService,
  type PsServiceOptions,
  type PsServiceState,
  type PsServiceStats,
} from './PsService.js';
export type { HandlerCounters, ShardCatalog } from './RequestHandlers.js';
export { LATENCY_BUCKETS, RequestTally } from './RequestTally.js';
export {
  DEFAULT_TABLE_BYTES,
  type NonFinitePolicy,
  parseServiceTables,
  type ServiceTables,
  serviceTablesSchema,
} from './ServiceConfig.js';
export {
  MAX_METRICS_CONNECTIONS,
  type RequestOutcome,
  ServiceMetrics,
} from './ServiceMetrics.js';
export {
  DEFAULT_ETCD_PREFIX,
  type EtcdRegistrationOptions,
  ShardRegistration,
} from './ShardRegistration.js';
export {
  type PushOrigin,
  type WriterAdmission,
  WriterBindings,
  type WriterBindingsOptions,
} from './WriterBindings.js';
