/** Stable codes of `@rdmajs/ps-wire`; users match on these, they are never renamed. */
export type PsWireErrorCode =
  /** Fewer bytes than the message's fixed part or its declared lengths need. */
  | 'ERR_PS_WIRE_TRUNCATED'
  /** More bytes than the message declares. */
  | 'ERR_PS_WIRE_TRAILING'
  /** A count or length beyond the decoder's limits (checked before anything is allocated). */
  | 'ERR_PS_WIRE_TOO_LARGE'
  /** A version this decoder does not speak. */
  | 'ERR_PS_WIRE_VERSION'
  /** Another message kind than the one expected. */
  | 'ERR_PS_WIRE_KIND'
  /** A field out of its range: reserved bits set, a bad name, a zero dim, a sequence past 2^53 − 1. */
  | 'ERR_PS_WIRE_FIELD'
  /** The encoder was given values it cannot represent. */
  | 'ERR_PS_WIRE_INVALID_ARG';

export interface PsWireErrorOptions {
  /** Byte offset of the field that failed (decode errors). */
  offset?: number;
  cause?: unknown;
}

/** Every error this package throws. Decode errors carry the `offset` of the failing field. */
export class PsWireError extends Error {
  readonly code: PsWireErrorCode;
  readonly offset: number | undefined;
  readonly retryable = false;

  constructor(code: PsWireErrorCode, message: string, options: PsWireErrorOptions = {}) {
    super(
      options.offset === undefined ? message : `${message} (offset ${options.offset})`,
      options.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = 'PsWireError';
    this.code = code;
    this.offset = options.offset;
  }
}
