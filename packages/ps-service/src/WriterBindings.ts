import { PsServiceError } from './errors.js';

/** Who a push comes from, as the RPC layer says (`CallContext`). */
export interface PushOrigin {
  readonly sessionId: string | undefined;
  readonly peer: string | undefined;
}

export interface WriterBindingsOptions {
  /** Writer ids one RPC session may push under (ps-client uses one). Default 1. */
  maxWritersPerSession?: number;
  /**
   * Writer ids the store does not know yet that one peer (remote host) may create, counted
   * while the store remembers them. Default 1024.
   */
  maxNewWritersPerPeer?: number;
}

/** What `admit` found: the caller binds after the store accepted the push (see `bind`). */
export type WriterAdmission = 'bound' | 'known' | 'new';

interface Binding {
  session: string;
}

/** Sweeps of inactive bindings start at this many (then at twice what is left). */
const SWEEP_AT = 4096;

/**
 * Ties the store's writer ids (the `writer` of push requests, the store's de-duplication key)
 * to the authenticated RPC session that pushes under them, so one client cannot push under
 * another's writer id (forged seqs would make that writer's later pushes "duplicates") nor
 * fill the store's writer table:
 *
 * - a writer bound to a session that is still active (connected, its de-duplication session
 *   open) is refused to every other session (ERR_PS_REQUEST_WRITER_IN_USE);
 * - a writer whose session is gone (the client opened a new session after the old one failed,
 *   or restarted) is taken over by the next session that pushes under it, which keeps
 *   exactly-once across those: the store still de-duplicates the resent (writer, seq);
 * - a session uses at most `maxWritersPerSession` writers, and a peer creates at most
 *   `maxNewWritersPerPeer` writers that the store still remembers.
 *
 * Bindings live in memory: after a restart the first session to push under a writer binds it.
 */
export class WriterBindings {
  readonly #maxPerSession: number;
  readonly #maxNewPerPeer: number;
  readonly #isActive: (sessionId: string) => boolean;
  /** The last seq the store applied under a writer (undefined: a writer it does not know). */
  readonly #lastSeq: (writer: string) => number | undefined;
  readonly #byWriter = new Map<string, Binding>();
  readonly #bySession = new Map<string, Set<string>>();
  /** Peer → writers it created (new to the store when it did). */
  readonly #created = new Map<string, Set<string>>();
  #sweepAt = SWEEP_AT;

  constructor(
    options: WriterBindingsOptions,
    isActive: (sessionId: string) => boolean,
    lastSeq: (writer: string) => number | undefined,
  ) {
    const int = (name: string, v: number | undefined, d: number): number => {
      const n = v ?? d;
      if (!Number.isSafeInteger(n) || n < 1) {
        throw new PsServiceError('ERR_PS_SERVICE_CONFIG', `${name} must be a positive integer`);
      }
      return n;
    };
    this.#maxPerSession = int('maxWritersPerSession', options.maxWritersPerSession, 1);
    this.#maxNewPerPeer = int('maxNewWritersPerPeer', options.maxNewWritersPerPeer, 1024);
    this.#isActive = isActive;
    this.#lastSeq = lastSeq;
  }

  /**
   * Whether `origin` may push under `writer`; throws the refusal (nothing applied). A call
   * outside an RPC session (no `sessionId`) is not bound.
   */
  admit(writer: string, seq: number, origin: PushOrigin): WriterAdmission {
    const session = origin.sessionId;
    if (session === undefined) return 'bound';
    const owner = this.#byWriter.get(writer);
    if (owner !== undefined) {
      if (owner.session === session) return 'bound';
      // A resend of a push the store already applied (its client lost the reply and opened a
      // new session before the server saw the old one close) changes nothing: the store
      // answers it as a duplicate. Refusing it would tell the client "nothing applied".
      if ((this.#lastSeq(writer) ?? -1) >= seq) return 'bound';
      if (this.#isActive(owner.session)) {
        throw new PsServiceError(
          'ERR_PS_REQUEST_WRITER_IN_USE',
          `writer ${writer} is in use by another session`,
        );
      }
    }
    if ((this.#bySession.get(session)?.size ?? 0) >= this.#maxPerSession) {
      throw new PsServiceError(
        'ERR_PS_REQUEST_TOO_MANY_WRITERS',
        `a session pushes under at most ${this.#maxPerSession} writer ids (maxWritersPerSession)`,
      );
    }
    if (this.#lastSeq(writer) !== undefined) return 'known';
    const created = this.#created.get(origin.peer ?? '?');
    if (created !== undefined && created.size >= this.#maxNewPerPeer) {
      for (const w of created) if (this.#lastSeq(w) === undefined) created.delete(w);
      if (created.size >= this.#maxNewPerPeer) {
        throw new PsServiceError(
          'ERR_PS_REQUEST_WRITER_QUOTA',
          `peer ${origin.peer} created ${created.size} writer ids the store remembers (maxNewWritersPerPeer)`,
        );
      }
    }
    return 'new';
  }

  /** Binds `writer` to the session after the store accepted its push (`admitted` from `admit`). */
  bind(writer: string, origin: PushOrigin, admitted: WriterAdmission): void {
    const session = origin.sessionId;
    if (admitted === 'bound' || session === undefined) return;
    const owner = this.#byWriter.get(writer);
    if (owner !== undefined) this.#unbind(writer, owner.session);
    if (this.#byWriter.size >= this.#sweepAt) this.#sweep();
    this.#byWriter.set(writer, { session });
    const mine = this.#bySession.get(session);
    if (mine === undefined) this.#bySession.set(session, new Set([writer]));
    else mine.add(writer);
    if (admitted === 'new') {
      const peer = origin.peer ?? '?';
      const created = this.#created.get(peer);
      if (created === undefined) this.#created.set(peer, new Set([writer]));
      else created.add(writer);
    }
  }

  /** Bindings held (tests, stats). */
  get size(): number {
    return this.#byWriter.size;
  }

  #unbind(writer: string, session: string): void {
    this.#byWriter.delete(writer);
    const set = this.#bySession.get(session);
    set?.delete(writer);
    if (set?.size === 0) this.#bySession.delete(session);
  }

  /** Forgets bindings of inactive sessions and writers the store forgot: memory follows use. */
  #sweep(): void {
    for (const [writer, b] of this.#byWriter) {
      if (!this.#isActive(b.session)) this.#unbind(writer, b.session);
    }
    for (const [peer, created] of this.#created) {
      for (const w of created) if (this.#lastSeq(w) === undefined) created.delete(w);
      if (created.size === 0) this.#created.delete(peer);
    }
    this.#sweepAt = Math.max(SWEEP_AT, 2 * this.#byWriter.size);
  }
}
