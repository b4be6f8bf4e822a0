import { RpcError } from './errors.js';
import {
  checkFunction,
  checkInt,
  checkKnownKeys,
  checkNumber,
  describeValue,
  ownOptions,
} from './internal/validate.js';

/**
 * What the reconnect loop asks between attempts. `attempt` counts retries from 1 (the
 * first retry after the first failure); `elapsedMs` is the time since that failure on the
 * loop's clock; `failure` is the error of the attempt that just failed (policies may look
 * at it, e.g. with `isRefusedConnect`). Returns the delay before that retry in
 * milliseconds, or null to give up. Implementations must be bounded: every policy gives
 * up eventually.
 */
export interface BackoffPolicy {
  nextDelay(attempt: number, elapsedMs: number, failure?: unknown): number | null;
}

/**
 * Whether an attempt failed because the peer's host refused the TCP connection
 * (`ECONNREFUSED` anywhere in the `cause` chain): nothing listens there yet, as while a
 * server restarts. Such an attempt cost that host one reset and no work.
 */
export function isRefusedConnect(failure: unknown): boolean {
  let e: unknown = failure;
  for (let depth = 0; depth < 8 && typeof e === 'object' && e !== null; depth++) {
    if ((e as { code?: unknown }).code === 'ECONNREFUSED') return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** How random the delay is within the exponential envelope `d` (AWS's names). */
export type BackoffJitter =
  /** uniform in [0, d): spreads reconnecting clients the most (the default). */
  | 'full'
  /** uniform in [d/2, d): never much shorter than the envelope. */
  | 'equal'
  /** exactly d: for tests and single clients. */
  | 'none';

export interface ExponentialBackoffOptions {
  /** Envelope of the first retry, ms. Default 50. */
  baseMs?: number;
  /** Largest envelope, ms. Default 2000. */
  capMs?: number;
  /** Growth of the envelope per attempt (>= 1). Default 2. */
  factor?: number;
  /** Retries before giving up. Default unlimited (the deadline bounds them). */
  maxAttempts?: number;
  /** Time since the first failure after which no retry is made, ms. Default 30 000. */
  deadlineMs?: number;
  /**
   * Largest envelope after a refused connection (`isRefusedConnect`), ms. Default 50:
   * probing a port nothing listens on costs the server nothing, and a restarted server is
   * then found within this long of listening; the exponential envelope still spaces
   * attempts the server answered (refusals, handshakes it could not finish), which cost it
   * work. Capped by `capMs`.
   */
  refusedCapMs?: number;
  /** Default 'full'. */
  jitter?: BackoffJitter;
  /** Uniform numbers in [0, 1); default Math.random. Inject a seeded one in tests. */
  random?: () => number;
}

const JITTERS: readonly BackoffJitter[] = ['full', 'equal', 'none'];
const KEYS = [
  'baseMs',
  'capMs',
  'factor',
  'maxAttempts',
  'deadlineMs',
  'refusedCapMs',
  'jitter',
  'random',
];

/**
 * The default policy: jittered exponential backoff. The envelope of retry `n` is
 * `min(capMs, baseMs * factor^(n-1))` (at most `refusedCapMs` after a refused connection);
 * the delay is drawn within it per `jitter`, and never
 * runs past `deadlineMs` (the last retry happens at the deadline at the latest). Gives up
 * after `maxAttempts` retries or once `deadlineMs` has passed, whichever comes first.
 */
export class ExponentialBackoff implements BackoffPolicy {
  readonly baseMs: number;
  readonly capMs: number;
  readonly factor: number;
  readonly maxAttempts: number;
  readonly deadlineMs: number;
  readonly refusedCapMs: number;
  readonly jitter: BackoffJitter;
  private readonly random: () => number;

  constructor(options?: ExponentialBackoffOptions) {
    const o = ownOptions('ExponentialBackoff options', options, true);
    checkKnownKeys('ExponentialBackoff', o, KEYS);
    this.baseMs = o.baseMs === undefined ? 50 : checkNumber('baseMs', o.baseMs, 0);
    this.capMs =
      o.capMs === undefined
        ? Math.max(2000, this.baseMs)
        : checkNumber('capMs', o.capMs, this.baseMs);
    this.factor = o.factor === undefined ? 2 : checkNumber('factor', o.factor, 1, 1000);
    this.maxAttempts =
      o.maxAttempts === undefined || o.maxAttempts === Number.POSITIVE_INFINITY
        ? Number.POSITIVE_INFINITY
        : checkInt('maxAttempts', o.maxAttempts, 0);
    this.deadlineMs =
      o.deadlineMs === undefined
        ? 30_000
        : o.deadlineMs === Number.POSITIVE_INFINITY
          ? Number.POSITIVE_INFINITY
          : checkNumber('deadlineMs', o.deadlineMs, 0);
    this.refusedCapMs = Math.min(
      this.capMs,
      o.refusedCapMs === undefined ? 50 : checkNumber('refusedCapMs', o.refusedCapMs, 0),
    );
    if (
      this.maxAttempts === Number.POSITIVE_INFINITY &&
      this.deadlineMs === Number.POSITIVE_INFINITY
    ) {
      throw new RpcError(
        'ERR_RPC_INVALID_ARG',
        'ExponentialBackoff: maxAttempts and deadlineMs cannot both be unlimited (a retry loop must end)',
      );
    }
    if (o.jitter !== undefined && !JITTERS.includes(o.jitter as BackoffJitter)) {
      throw new RpcError(
        'ERR_RPC_INVALID_ARG',
        `jitter must be one of ${JITTERS.join(', ')}, got ${describeValue(o.jitter)}`,
      );
    }
    this.jitter = (o.jitter as BackoffJitter | undefined) ?? 'full';
    this.random = o.random === undefined ? Math.random : checkFunction('random', o.random);
  }

  nextDelay(attempt: number, elapsedMs: number, failure?: unknown): number | null {
    checkInt('attempt', attempt, 1);
    checkNumber('elapsedMs', elapsedMs, 0, Number.POSITIVE_INFINITY);
    if (attempt > this.maxAttempts || elapsedMs >= this.deadlineMs) return null;
    const cap = isRefusedConnect(failure) ? this.refusedCapMs : this.capMs;
    // factor^(n-1) overflows to Infinity for large n; min() with the cap keeps it finite.
    const envelope = Math.min(cap, this.baseMs * this.factor ** (attempt - 1));
    let delay = envelope;
    if (this.jitter !== 'none') {
      const r = this.random();
      if (typeof r !== 'number' || !(r >= 0 && r < 1)) {
        throw new RpcError(
          'ERR_RPC_INVALID_ARG',
          `random() must return a number in [0, 1), got ${describeValue(r)}`,
        );
      }
      delay = this.jitter === 'full' ? r * envelope : envelope / 2 + (r * envelope) / 2;
    }
    return Math.min(delay, this.deadlineMs - elapsedMs);
  }
}
