/** Version of every message layout below; a decoder refuses any other. */
export const PS_WIRE_VERSION = 1;

/** The kind byte of each message (byte 1 of every message). */
export const PsMessageKind = {
  PullRequest: 1,
  PullReply: 2,
  PushRequest: 3,
  PushReply: 4,
  PullDenseRequest: 5,
  PullDenseReply: 6,
  PushDenseRequest: 7,
  PushDenseReply: 8,
  TableInfoRequest: 9,
  TableInfoReply: 10,
} as const;
export type PsMessageKind = (typeof PsMessageKind)[keyof typeof PsMessageKind];

/** RPC method names, one per request kind (the reply kind follows from it). */
export const PsMethod = {
  pull: 'ps.pull',
  push: 'ps.push',
  pullDense: 'ps.pullDense',
  pushDense: 'ps.pushDense',
  tableInfo: 'ps.tableInfo',
} as const;
export type PsMethod = (typeof PsMethod)[keyof typeof PsMethod];

/** Table and tensor names: 1 … 200 bytes of `[A-Za-z0-9_.-]` (the store's rule). */
export const MAX_NAME_BYTES = 200;
export const NAME_PATTERN = /^[A-Za-z0-9_.-]{1,200}$/;
/** Writer (push session) ids: 1 … 64 bytes of `[A-Za-z0-9_-]`. */
export const MAX_WRITER_BYTES = 64;
export const WRITER_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
/** Shard ids in a table-info reply: like writer ids. */
export const MAX_SHARD_ID_BYTES = 64;
/** Row width bound (the store's MAX_DIM). */
export const MAX_WIRE_DIM = 4096;
/** Push sequences are at most 2^53 − 1 (exact in a JS number). */
export const MAX_WIRE_SEQ = Number.MAX_SAFE_INTEGER;

/**
 * The largest ps-wire message either side sends: the RPC layer's and the transports'
 * default 16 MiB message limit, less room for the RPC header. A pull whose reply would be
 * larger is split by the client and refused by the server; such a push is refused.
 */
export const MAX_MESSAGE_BYTES = (16 << 20) - 4096;

/** Fixed-part sizes, bytes. */
export const PULL_REQUEST_FIXED = 16;
export const PULL_REPLY_FIXED = 16;
export const PUSH_REQUEST_FIXED = 24;
export const PUSH_REPLY_BYTES = 16;
export const PULL_DENSE_REQUEST_FIXED = 8;
export const PULL_DENSE_REPLY_FIXED = 8;
export const PUSH_DENSE_REQUEST_FIXED = 24;
export const TABLE_INFO_REQUEST_BYTES = 8;
export const TABLE_INFO_REPLY_FIXED = 16;
export const TABLE_ENTRY_FIXED = 8;
/** A table entry's init: kind u8, reserved u8 + u16, seed u32, two f64 parameters. */
export const TABLE_INIT_BYTES = 24;

/** Flags of a push reply. */
export const PushReplyFlags = { applied: 1, duplicate: 2 } as const;
/** Flags of a table entry. */
export const TableFlags = { rejectNonFinite: 1, readable: 2 } as const;
/**
 * A readable table's entry (flag `readable`) carries, after its init: descriptor length u16 |
 * reserved u16 + u32 | the descriptor (opaque here: mux's read descriptor), padded to 8.
 */
export const TABLE_READ_FIXED = 8;
/** Longest read descriptor a table entry carries. */
export const MAX_TABLE_READ_DESCRIPTOR = 256;
