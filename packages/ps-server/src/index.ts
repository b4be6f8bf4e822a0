export { CountMinSketch } from './CountMinSketch.js';
export { DenseTensor, type DenseTensorConfig } from './DenseTensor.js';
export {
  PsCorruptError,
  PsError,
  type PsErrorCode,
  type PsErrorOptions,
  PsNoValidSnapshotError,
} from './errors.js';
export { firstNonFinite } from './firstNonFinite.js';
export { HashIndex, type HashIndexOptions } from './HashIndex.js';
export { counterU32, createInit, type InitConfig, type InitFn } from './KeyInit.js';
export {
  createOptimizer,
  type Optimizer,
  type OptimizerConfig,
  type OverflowPolicy,
  type UpdateKernel,
} from './Optimizer.js';
export {
  type DurableStoreOptions,
  MAX_BATCH_KEYS,
  MAX_PUSH_FLOATS,
  ParameterStore,
  type PushOptions,
  type PushResult,
  type RestoreReport,
  type SnapshotInfo,
  type StoreOptions,
  type StoreState,
} from './ParameterStore.js';
export type { LogPolicy, PushLogOptions } from './PushLog.js';
export { heapRowMemory, type RowBlock, type RowMemory } from './RowMemory.js';
export { SNAPSHOT_FORMAT, SNAPSHOT_VERSION } from './Snapshot.js';
export {
  type AdmissionConfig,
  MAX_DIM,
  MAX_ROWS,
  SparseTable,
  type SparseTableConfig,
  type SparseTableStats,
} from './SparseTable.js';
export { StoreViewWriter } from './StoreViewWriter.js';
