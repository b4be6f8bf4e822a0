import { checkInt, ownOptions } from './internal/validate.js';

/** Version of the `FlowParams` layout. */
export const FLOW_PARAMS_VERSION = 1;

/**
 * What one side announces in the handshake: plain integers, safe to carry as JSON or in a
 * fixed binary header.
 */
export interface FlowParams {
  readonly version: number;
  /** Receive buffers this side posted for the peer: the peer's initial send credits. */
  readonly receiveCredits: number;
  /** Credits the peer must keep back for credit updates. */
  readonly reservedCredits: number;
  /** This side returns credits explicitly once this many are owed. */
  readonly returnThreshold: number;
  /** Outstanding bytes this side allows per connection (either direction). */
  readonly windowBytes: number;
  /** Outstanding messages this side allows per connection. */
  readonly windowMessages: number;
  /** Largest eager message one of this side's receive buffers holds. */
  readonly maxMessageBytes: number;
}

/** What both sides use after the handshake, shaped for the constructors. */
export interface AgreedFlow {
  /** The flow-parameter version both sides speak. */
  readonly version: number;
  /** For `new SendCredits({ ...send })`: the peer's posted buffers, the peer's reserve. */
  readonly send: { readonly initialCredits: number; readonly reservedCredits: number };
  /** For `new ReceiveCredits({ ...receive })`: our posted buffers. */
  readonly receive: {
    readonly initialCredits: number;
    readonly reservedCredits: number;
    readonly returnThreshold: number;
  };
  /** For `new SendWindow({ ...window })`: the smaller of both offers. */
  readonly window: { readonly maxBytes: number; readonly maxMessages: number };
  /** Largest eager message we may send: it must fit the peer's receive buffers. */
  readonly maxMessageBytes: number;
}

const DEFAULTS: FlowParams = {
  version: FLOW_PARAMS_VERSION,
  receiveCredits: 64,
  reservedCredits: 1,
  returnThreshold: 32,
  windowBytes: 4 * 1024 * 1024,
  windowMessages: 64,
  maxMessageBytes: 8 * 1024,
};

/** Validated parameters: defaults overridden by `overrides`. */
export function defaultFlowParams(overrides: Partial<FlowParams> = {}): FlowParams {
  return parseFlowParams({ ...DEFAULTS, ...ownOptions('flow parameter overrides', overrides) });
}

/**
 * Validates parameters received from a peer (or built locally). Throws
 * ERR_FLOWCTL_INVALID_ARG naming the first bad field; unknown fields are ignored.
 */
export function parseFlowParams(value: unknown): FlowParams {
  // Own properties only: a peer's values never come from a prototype.
  const v = ownOptions('flow parameters', value);
  const version = checkInt('version', v.version, 1);
  const reservedCredits = checkInt('reservedCredits', v.reservedCredits, 1);
  const receiveCredits = checkInt('receiveCredits', v.receiveCredits, reservedCredits + 2);
  const returnThreshold = checkInt(
    'returnThreshold',
    v.returnThreshold,
    2,
    receiveCredits - reservedCredits,
  );
  return {
    version,
    receiveCredits,
    reservedCredits,
    returnThreshold,
    windowBytes: checkInt('windowBytes', v.windowBytes, 1),
    windowMessages: checkInt('windowMessages', v.windowMessages, 1),
    maxMessageBytes: checkInt('maxMessageBytes', v.maxMessageBytes, 1),
  };
}

/**
 * Combines both announcements. Symmetric: each side calls it with (own, peer's) and the two
 * results mirror each other (my `send` is the peer's `receive`). Throws
 * ERR_FLOWCTL_INVALID_ARG when either side's values are invalid. A peer announcing a newer
 * version is spoken to in the oldest common one.
 */
export function negotiateFlow(local: FlowParams, remote: FlowParams): AgreedFlow {
  const l = parseFlowParams(local);
  const r = parseFlowParams(remote);
  const windowBytes = Math.min(l.windowBytes, r.windowBytes);
  return {
    version: Math.min(l.version, r.version, FLOW_PARAMS_VERSION),
    send: { initialCredits: r.receiveCredits, reservedCredits: r.reservedCredits },
    receive: {
      initialCredits: l.receiveCredits,
      reservedCredits: l.reservedCredits,
      returnThreshold: l.returnThreshold,
    },
    window: {
      maxBytes: windowBytes,
      maxMessages: Math.min(l.windowMessages, r.windowMessages),
    },
    maxMessageBytes: Math.min(r.maxMessageBytes, windowBytes),
  };
}
