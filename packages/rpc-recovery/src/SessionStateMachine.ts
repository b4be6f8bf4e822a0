import { EventEmitter } from 'node:events';
import { sessionStateChannel } from './diagnostics.js';
import { EpochFilter } from './EpochFilter.js';
import { RpcError } from './errors.js';
import { checkFunction, checkKnownKeys, checkSessionId, ownOptions } from './internal/validate.js';

/**
 * The life of a session (which outlives its connections):
 *
 *   connecting ──► connected ──► recovering ──► connected (next epoch)
 *        │             │  ▲            │
 *        │             │  └────────────┘
 *        └──► failed ◄─┴───────────────┘        any non-terminal state ──► closed
 */
export type SessionState = 'connecting' | 'connected' | 'recovering' | 'failed' | 'closed';

/** The legal transitions; everything else is refused with ERR_RPC_INVALID_STATE. */
export const SESSION_TRANSITIONS: Readonly<Record<SessionState, readonly SessionState[]>> =
  Object.freeze({
    connecting: Object.freeze(['connected', 'failed', 'closed'] as const),
    connected: Object.freeze(['recovering', 'failed', 'closed'] as const),
    recovering: Object.freeze(['connected', 'failed', 'closed'] as const),
    failed: Object.freeze([] as const),
    closed: Object.freeze([] as const),
  });

/** One state change, as events and the `rdmajs:rpc:session:state` channel carry it. */
export interface SessionStateChange {
  readonly sessionId: string | undefined;
  readonly from: SessionState;
  readonly to: SessionState;
  /** The epoch after the change (0 before the first connection). */
  readonly epoch: number;
  /** What caused it: the fault for 'recovering' and 'failed'. */
  readonly reason: Error | undefined;
  /** On the injected clock. */
  readonly at: number;
}

/** Typed events: 'state' for every change, and one event named after each target state. */
export interface SessionEvents {
  state: [SessionStateChange];
  connected: [SessionStateChange];
  recovering: [SessionStateChange];
  failed: [SessionStateChange];
  closed: [SessionStateChange];
}

export interface SessionStateMachineOptions {
  /** Known from the start on the server; a client learns it on its first connection. */
  sessionId?: string;
  /** Timestamps of changes; default `performance.now`. */
  now?: () => number;
}

/**
 * The session state machine. One private place changes the state; illegal transitions throw
 * ERR_RPC_INVALID_STATE and change nothing. Each change is emitted as typed events and
 * published on `node:diagnostics_channel`. It owns the session's `EpochFilter`: a
 * (re)connection opens its epoch, losing the connection closes it, so completions of an
 * old epoch are never delivered to a new one.
 */
export class SessionStateMachine extends EventEmitter<SessionEvents> {
  private current: SessionState = 'connecting';
  private id: string | undefined;
  private readonly now: () => number;
  /** Completions and replies pass through this before delivery. */
  readonly epochs: EpochFilter;

  constructor(options?: SessionStateMachineOptions) {
    super();
    const o = ownOptions('SessionStateMachine options', options, true);
    checkKnownKeys('SessionStateMachine', o, ['sessionId', 'now']);
    this.id = o.sessionId === undefined ? undefined : checkSessionId(o.sessionId);
    this.now = o.now === undefined ? () => performance.now() : checkFunction('now', o.now);
    this.epochs = new EpochFilter(this.id);
  }

  get state(): SessionState {
    return this.current;
  }

  get sessionId(): string | undefined {
    return this.id;
  }

  get epoch(): number {
    return this.epochs.current;
  }

  /** True when `to` is a legal next state. */
  can(to: SessionState): boolean {
    return SESSION_TRANSITIONS[this.current].includes(to);
  }

  /**
   * connecting/recovering → connected at `epoch` (above every earlier epoch: a resume's).
   * A client passes the session id it was issued on its first connection.
   */
  connected(epoch: number, sessionId?: string): SessionStateChange {
    this.check('connected');
    if (sessionId !== undefined) {
      checkSessionId(sessionId);
      if (this.id !== undefined && this.id !== sessionId) {
        throw new RpcError(
          'ERR_RPC_INVALID_STATE',
          `session ${this.id} cannot connect as session ${sessionId}`,
        );
      }
    }
    this.epochs.advance(epoch); // validates before anything changes
    if (sessionId !== undefined && this.id === undefined) {
      this.id = sessionId;
      this.epochs.sessionId = sessionId;
    }
    return this.move('connected', undefined);
  }

  /** connected → recovering: the connection failed (`reason`); its epoch stops delivering. */
  lost(reason: Error): SessionStateChange {
    this.check('recovering');
    this.checkReason(reason);
    this.epochs.close();
    return this.move('recovering', reason);
  }

  /** connecting/connected/recovering → failed: recovery is impossible or gave up. Terminal. */
  fail(reason: Error): SessionStateChange {
    this.check('failed');
    this.checkReason(reason);
    this.epochs.close();
    return this.move('failed', reason);
  }

  /**
   * → closed from any non-terminal state. Idempotent: returns undefined when already
   * closed or failed (a failed session needs no closing).
   */
  close(): SessionStateChange | undefined {
    if (this.current === 'closed' || this.current === 'failed') return undefined;
    this.epochs.close();
    return this.move('closed', undefined);
  }

  private check(to: SessionState): void {
    if (!this.can(to)) {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        `session${this.id === undefined ? '' : ` ${this.id}`}: cannot go from ${this.current} to ${to}`,
      );
    }
  }

  private checkReason(reason: unknown): void {
    if (!(reason instanceof Error)) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'the reason of a fault must be an Error');
    }
  }

  /** The one place the state changes. */
  private move(
    to: Exclude<SessionState, 'connecting'>,
    reason: Error | undefined,
  ): SessionStateChange {
    const change: SessionStateChange = {
      sessionId: this.id,
      from: this.current,
      to,
      epoch: this.epochs.current,
      reason,
      at: this.now(),
    };
    this.current = to;
    if (sessionStateChannel.hasSubscribers) sessionStateChannel.publish(change);
    this.emit('state', change);
    this.emit(to, change);
    return change;
  }
}
