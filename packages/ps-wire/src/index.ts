export { PS_CREDIT_FLUSH_MS } from './CreditFlush.js';
export {
  allocatePullDenseReply,
  decodePullDenseReply,
  decodePullDenseRequest,
  decodePushDenseRequest,
  encodePullDenseReply,
  encodePullDenseRequest,
  encodePushDenseRequest,
  encodePushDenseRequestInto,
  type PullDenseRequest,
  type PushDenseRequest,
  pullDenseReplyInto,
  pullDenseReplyLength,
  pushDenseRequestLength,
} from './Dense.js';
export { PsWireError, type PsWireErrorCode, type PsWireErrorOptions } from './errors.js';
export { HALF_TO_FLOAT, toHalf } from './Fp16.js';
export { fmix32, hash64 } from './Hash.js';
export {
  counterU32,
  INIT_DEFAULTS,
  type InitConfig,
  type InitFn,
  initRowFn,
  type ResolvedInit,
  resolveInit,
} from './KeyInit.js';
export { DEFAULT_PS_WIRE_LIMITS, type PsWireLimits, psWireLimits } from './Limits.js';
export {
  allocatePullReply,
  allocatePullRequest,
  decodePullReply,
  decodePullRequest,
  encodePullReply,
  encodePullRequest,
  type PullReply,
  type PullRequest,
  pullReplyInto,
  pullReplyLength,
  pullRequestLength,
  writePullRequestHead,
} from './Pull.js';
export {
  allocatePushRequest,
  decodePushReply,
  decodePushRequest,
  encodePushReply,
  encodePushRequest,
  type PushReply,
  type PushRequest,
  type PushRequestHeader,
  pushRequestLength,
  writePushRequestHead,
} from './Push.js';
export {
  MAX_MESSAGE_BYTES,
  MAX_NAME_BYTES,
  MAX_SHARD_ID_BYTES,
  MAX_WIRE_DIM,
  MAX_WIRE_SEQ,
  MAX_WRITER_BYTES,
  NAME_PATTERN,
  PS_WIRE_VERSION,
  PsMessageKind,
  PsMethod,
  PULL_REPLY_FIXED,
  PUSH_REPLY_BYTES,
  PushReplyFlags,
  TableFlags,
  WRITER_PATTERN,
} from './Schema.js';
export {
  decodeStoreViewHeader,
  STORE_VIEW,
  STORE_VIEW_HEADER,
  STORE_VIEW_META,
  type StoreViewLayout,
  type StoreViewShape,
  storeViewLayout,
  storeViewRowOffset,
  writeStoreViewHeader,
} from './StoreView.js';
export {
  localViewRead,
  readStoreView,
  StoreViewReader,
  type StoreViewReaderOptions,
  ViewKeyStatus,
  type ViewReadFn,
  type ViewReadList,
} from './StoreViewReader.js';
export { StoreViewSlotCache } from './StoreViewSlotCache.js';
export {
  decodeTableInfoReply,
  decodeTableInfoRequest,
  encodeTableInfoReply,
  encodeTableInfoRequest,
  type TableInfo,
  type WireDenseInfo,
  type WireTableInfo,
} from './TableInfo.js';
