export { AEAD_NONCE_BYTES, AEAD_TAG_BYTES, writeAeadNonce } from './AeadNonce.js';
export type { Channel, ChannelState, ReceiveOptions, SendOptions } from './Channel.js';
export { ChannelCore, type ChannelHost } from './ChannelCore.js';
export type { Connection, ConnectionEvents, ConnectionState } from './Connection.js';
export {
  MuxAbortError,
  MuxClosedError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  type MuxErrorCode,
  type MuxErrorOptions,
  MuxHandshakeError,
  MuxProtocolError,
} from './errors.js';
export {
  CREDIT_PAYLOAD_BYTES,
  decodeFrameHeader,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameHeader,
  type FrameLimits,
  FrameType,
  MAX_CHANNEL_NAME_BYTES,
  PING_PAYLOAD_BYTES,
  readU32,
  writeU32,
} from './FrameHeader.js';
export {
  HANDSHAKE_MAGIC,
  HANDSHAKE_MESSAGE_BYTES,
  HANDSHAKE_TRANSPORTS,
  Handshake,
  type HandshakeLimits,
  type HandshakeOptions,
  type HandshakeState,
  type HandshakeTransport,
  MAX_FRAME_LIMIT,
  MIN_SECRET_BYTES,
  MIN_WINDOW_BYTES,
  PROTOCOL_VERSION,
  SESSION_KEY_BYTES,
  type SessionKeys,
} from './Handshake.js';
export type { PollPolicy, RdmaAblation, RdmaTuning } from './internal/RdmaOptions.js';
export type { ReceivePoolStats } from './internal/ReceivePool.js';
export {
  InboundMessage,
  type MessagePart,
  messageViews,
  type OutboundMessage,
  partBytes,
} from './Message.js';
export {
  hostKey,
  type PendingHandshakeLimits,
  type PendingHandshakeOptions,
  PendingHandshakes,
  pendingHandshakeLimits,
} from './PendingHandshakes.js';
export { RdmaChannel } from './RdmaChannel.js';
export { RdmaConnection } from './RdmaConnection.js';
export { RdmaListener } from './RdmaListener.js';
export type { RdmaConnectionStats } from './RdmaStats.js';
export {
  RdmaTransport,
  type RdmaTransportOptions,
  type RdmaTransportStats,
} from './RdmaTransport.js';
export {
  decodeReadDescriptor,
  encodeReadDescriptor,
  READ_DESCRIPTOR_BYTES,
  type ReadDescriptor,
} from './ReadDescriptor.js';
export { MAX_READ_ITEM_BYTES, MAX_READ_LIST, ReadList } from './ReadList.js';
export { ReadRegion } from './ReadRegion.js';
export type { ChannelStats, ConnectionStats } from './Stats.js';
export { socketHandshake } from './socketHandshake.js';
export type {
  ConnectOptions,
  Listener,
  ListenerEvents,
  ListenOptions,
  SharedSecret,
  Transport,
} from './Transport.js';
export { checkInt, signalOf, timeoutOf, type WaitOptions } from './WaitOptions.js';
