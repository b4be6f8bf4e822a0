/** A completion queue the adaptive poll loop keeps polling (an RdmaConnection's). */
export interface PolledCq {
  /** Completions wait in the CQ (cheap: no completion is taken). */
  pending(): number;
  /** Reaps what the CQ holds and hands it on (reporting to activity() and received()). */
  drain(): void;
  /** Leaves the loop: arm the CQ event (a completion already there is delivered at once). */
  sleep(): void;
}

/** Entry of one CQ in the loop: reused for the connection's life (nothing per message). */
export class PollEntry {
  readonly cq: PolledCq;
  /** In the loop's list now. */
  polled = false;
  /** Activity (a send posted, a receive reaped) since the last turn: its spin starts again. */
  fresh = false;
  /** When the turn after its last activity ran (performance.now() ms). */
  since = 0;
  /** A receive came early in this stay in the loop (spinning paid). */
  caught = false;
  /** Recent benefit: +2 per receive early in a stay, −1 per late one or per stay with none. */
  worth = WORTH_MAX;
  /** While worth is 0, activity that did not enter the loop (every PROBE_EVERY-th enters). */
  skipped = 0;
  /** Its previous turn in this stay (performance.now() ms; −1 before its first). */
  lastTurn = -1;
  /** Time polled in vain (turns that found its CQ empty) not yet charged to worth. */
  idleMs = 0;
  /**
   * How long after its activity its receives came lately (a moving average, ms; −1 before the
   * first): the stay after activity lasts a few times this (`measure`), not always spinUs.
   */
  delayMs = -1;
  /** The spin of a stay after its last activity (ms; −1: the loop's spinUs until measured). */
  budgetMs = -1;
  /** When the last probe (a stay entered at worth 0) began (performance.now() ms). */
  probedAt = Number.NEGATIVE_INFINITY;
  /** Turns that polled this CQ, and receives they caught (RdmaConnectionStats). */
  turns = 0;
  catches = 0;

  constructor(cq: PolledCq) {
    this.cq = cq;
  }

  /**
   * A receive came `delayMs` after activity: the moving average of that delay, and the spin
   * of a stay from it, BUDGET_DELAYS times it within [spinMs / BUDGET_MIN_PART, spinMs]. A
   * ping-pong whose reply comes 15 µs after its send keeps ~45 µs; a CQ whose receives come
   * at once (many messages in flight: the next one is there by the next turn, or not soon)
   * stops after spinMs / 8 without one, so the gaps of a busy connection are slept through
   * (its CQ event) instead of polled. Stores, not returns: a double returned from a call
   * that is not inlined is allocated.
   */
  measure(delayMs: number, spinMs: number): void {
    this.delayMs = this.delayMs < 0 ? delayMs : this.delayMs + (delayMs - this.delayMs) / 4;
    this.budgetMs = Math.min(
      spinMs,
      Math.max(spinMs / BUDGET_MIN_PART, BUDGET_DELAYS * this.delayMs),
    );
  }
}

/** The most benefit remembered (so a few fruitless stays after a run of catches stop it). */
const WORTH_MAX = 8;
/** While spinning does not pay, every this many activities enter the loop anyway (2^k)… */
const PROBE_EVERY = 32;
/**
 * …and at most once per this many spinUs: with many messages in flight activity comes every
 * few µs, and a probe per 32 of them kept a CQ polled (x16 round trips: 2 empty turns per
 * round trip, 1 % of them catching anything), so probes cost at most ~1/64 of a core.
 */
const PROBE_GAP_SPINS = 64;
/**
 * Polling in vain costs worth 1 per spinUs / this: a catch (+2) pays for half a spinUs of
 * empty turns. A ping-pong's reply came within that; with many messages in flight a stay
 * caught one receive early and then polled a whole spinUs for nothing after its last send
 * (x16 round trips: ~45 empty turns per catch), which kept worth at its maximum.
 */
const IDLE_UNITS_PER_SPIN = 4;
/** A stay spins this many times the usual delay of its receives after activity… */
const BUDGET_DELAYS = 3;
/** …and at least spinUs / this (a receive measured as immediate still gets a few turns). */
const BUDGET_MIN_PART = 8;

/**
 * The `adaptive` policy's poll loop, one per transport: after activity (a send posted, a
 * receive reaped) a connection's CQ is polled once per turn of the event loop, from the check
 * phase (setImmediate), for about `spinUs`; then its CQ event is armed and it sleeps. Polling
 * from turns, not a spin inside a callback, lets the application code its completions
 * trigger run at once (the reply a requester waits for is taken without a wake-up: eventfd →
 * libuv → JS costs tens of µs on a busy host). One loop for every connection of a transport,
 * so many connections cost one immediate per turn. Bounded by measured benefit: a stay that
 * takes no receive in the first half of spinUs counts −1, each receive in it +2 (at most 8),
 * each later one −1 (on a host with more runnable processes than cores the spin itself
 * delays the woken peer, which gets a core only once this process sleeps), and every
 * spinUs / 4 of turns that found the CQ empty −1; at 0 only every 32nd activity (and at most
 * one per 64 spinUs) enters the loop, for one spinUs that only an early receive extends, so
 * where replies come late (a loaded machine, a slow peer) `adaptive` becomes `event`. And a
 * stay lasts only as long as receives have lately taken to come (`PollEntry.measure`: 3× their
 * average delay after activity, within spinUs / 8 … spinUs), so a busy connection whose
 * arrivals come at once or not for a while stops paying for the gaps. With no traffic no
 * turn is scheduled: idle is ≈0 CPU.
 */
export class PollLoop {
  readonly #spinMs: number;
  readonly #idleUnitMs: number;
  readonly #entries: PollEntry[] = [];
  #scheduled = false;
  /** When the running (or last) turn began (performance.now() ms). */
  #now = 0;
  /** Turns run, over the transport's life (tests: no turn is scheduled while idle). */
  turns = 0;

  constructor(spinUs: number) {
    this.#spinMs = spinUs / 1000;
    this.#idleUnitMs = this.#spinMs / IDLE_UNITS_PER_SPIN;
  }

  /** CQs polled now. */
  get size(): number {
    return this.#entries.length;
  }

  /**
   * Activity on `e`: keep (or start) polling it. False when it should sleep instead (spinning
   * has not paid lately, or spinUs is 0): the caller arms its CQ.
   */
  activity(e: PollEntry): boolean {
    if (e.polled) {
      // A probe (worth 0) spins spinUs from its start; only benefit extends a stay.
      if (e.worth > 0) e.fresh = true;
      return true;
    }
    if (this.#spinMs === 0) return false;
    if (e.worth === 0) {
      if ((++e.skipped & (PROBE_EVERY - 1)) !== 0) return false;
      const now = performance.now();
      if (now - e.probedAt < this.#spinMs * PROBE_GAP_SPINS) return false;
      e.probedAt = now;
    }
    e.polled = true;
    e.fresh = true;
    e.caught = false;
    e.lastTurn = -1;
    this.#entries.push(e);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#turn);
    }
    return true;
  }

  /**
   * Receives of `e` were reaped. While it is polled they count as caught, also when its CQ
   * event (armed before it entered the loop) took them first: either way the process was
   * awake and took them without sleeping.
   */
  received(e: PollEntry): void {
    if (!e.polled) return;
    e.catches++;
    // Only a receive in the first half of the spin counts for spinning: on a host with more
    // runnable processes than cores a late one was often held back by the spin itself (the
    // woken peer got a core only as this process slept), so it must not keep spins going.
    // How long after its activity it came: 0 when the activity was this very turn.
    e.measure(e.fresh ? 0 : this.#now - e.since, this.#spinMs);
    if (e.fresh || this.#now - e.since < this.#spinMs / 2) {
      e.caught = true;
      e.worth = Math.min(WORTH_MAX, e.worth + 2);
    } else if (e.worth > 0) e.worth--;
    if (e.worth > 0) e.fresh = true;
  }

  /** `e` ends (its connection closed): out of the loop, without arming anything. */
  remove(e: PollEntry): void {
    if (!e.polled) return;
    e.polled = false;
    const i = this.#entries.indexOf(e);
    if (i >= 0) this.#entries.splice(i, 1);
  }

  readonly #turn = (): void => {
    this.#scheduled = false;
    this.turns++;
    // One clock read per turn, not per message: a CQ's spin counts from the first turn after
    // its activity, so application code that ran in between does not eat into it.
    const now = performance.now();
    this.#now = now;
    const es = this.#entries;
    // Backwards: a CQ that sleeps (or whose connection ends in its drain) leaves in place.
    for (let i = es.length - 1; i >= 0; i--) {
      const e = es[i] as PollEntry;
      e.turns++;
      if (e.cq.pending() > 0) e.cq.drain();
      else if (e.lastTurn >= 0) {
        // Polled in vain since its last turn: charged against worth, a unit at a time.
        e.idleMs += now - e.lastTurn;
        if (e.idleMs >= this.#idleUnitMs) {
          e.idleMs = 0;
          if (e.worth > 0) e.worth--;
        }
      }
      e.lastTurn = now;
      // Its drain may have ended the connection (removed) or slept it.
      if (!e.polled) continue;
      if (e.fresh) {
        e.fresh = false;
        e.since = now;
        continue;
      }
      // A probe (worth 0) spins spinUs: it measures whether spinning pays again.
      if (now - e.since < (e.worth > 0 && e.budgetMs >= 0 ? e.budgetMs : this.#spinMs)) continue;
      e.polled = false;
      const at = es.indexOf(e);
      if (at >= 0) es.splice(at, 1);
      if (!e.caught && e.worth > 0) e.worth--;
      e.cq.sleep();
    }
    if (es.length > 0 && !this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#turn);
    }
  };
}
