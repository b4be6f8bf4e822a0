/**
 * Two peers, A and B, each sending `messages` data messages to the other over RC-ordered
 * links, both starting with the fewest credits the package allows. No time: every step
 * performs one enabled action chosen by the caller's `choices` (a property-based test
 * supplies them), so every interleaving of deliveries and application releases is reachable.
 *
 * Each side reacts to every step the way a transport would: send data while a data credit
 * is free (piggybacking owed credits), then send an explicit credit update when one is
 * needed and any credit (the reserve included) is free.
 *
 * `reserve: false` is the ablation: data may spend the last credit (tryConsumeReserved),
 * which is what deadlocks two peers that both ran out.
 *
 * `group` makes the application hold received buffers until `group` of them are in hand (or
 * the last message came): reassembly. Then owed credits below the threshold are returned
 * only by the flush delay, a step ("tick": a side's clock runs to its next timer) that is
 * enabled whenever a timer is pending; `flush: false` is the ablation that never ticks.
 */
import { ManualClock, ReceiveCredits, SendCredits } from '../../src/index.js';

export interface BidiConfig {
  messages: number;
  credits: number;
  returnThreshold?: number;
  /** Data keeps the reserved credit back (the package's rule). False: the ablation. */
  reserve: boolean;
  /** Senders honour credits at all. False: the no-flow-control ablation. */
  creditsEnforced?: boolean;
  /** The application releases received buffers only in groups of this many (default 1). */
  group?: number;
  /** The flush delay's timers fire (default true). False: the ablation. */
  flush?: boolean;
  maxSteps?: number;
}

export type BidiOutcome = 'completed' | 'deadlock' | 'livelock';

export interface BidiResult {
  readonly outcome: BidiOutcome;
  readonly steps: number;
  readonly overruns: number;
  readonly updates: number;
  /** Smallest credit count a sender ever held. */
  readonly minAvailable: number;
  /** The conservation law held after every step: credits + in flight + owed/in use = total. */
  readonly conserved: boolean;
}

interface Msg {
  readonly kind: 'data' | 'update';
  readonly credits: number;
}

interface Side {
  readonly clock: ManualClock;
  readonly credits: SendCredits;
  readonly rc: ReceiveCredits;
  toSend: number;
  /** Received data buffers the application still holds. */
  held: number;
  /** Link toward the peer (FIFO, as RC keeps order). */
  readonly out: Msg[];
  received: number;
}

export function runBidirectional(cfg: BidiConfig, choices: readonly number[]): BidiResult {
  const enforced = cfg.creditsEnforced ?? true;
  const maxSteps = cfg.maxSteps ?? 10_000;
  const group = cfg.group ?? 1;
  const flush = cfg.flush ?? true;
  const mk = (): Side => {
    const clock = new ManualClock();
    return {
      clock,
      credits: new SendCredits({ initialCredits: cfg.credits, clock }),
      rc: new ReceiveCredits({
        initialCredits: cfg.credits,
        clock,
        ...(cfg.returnThreshold === undefined ? {} : { returnThreshold: cfg.returnThreshold }),
      }),
      toSend: cfg.messages,
      held: 0,
      out: [],
      received: 0,
    };
  };
  const a = mk();
  const b = mk();
  let overruns = 0;
  let updates = 0;
  let minAvailable = cfg.credits;
  let conserved = true;

  const react = (self: Side): void => {
    while (self.toSend > 0) {
      let ok: boolean;
      if (!enforced) ok = true;
      else ok = cfg.reserve ? self.credits.tryConsume() : self.credits.tryConsumeReserved();
      if (!ok) break;
      self.toSend--;
      self.out.push({ kind: 'data', credits: self.rc.takePiggyback() });
    }
    if (self.rc.updateNeeded && (!enforced || self.credits.tryConsumeReserved())) {
      updates++;
      self.out.push({ kind: 'update', credits: self.rc.takeUpdate() });
    }
    if (self.credits.available < minAvailable) minAvailable = self.credits.available;
  };

  const deliver = (from: Side, to: Side): void => {
    const msg = from.out.shift() as Msg;
    if (!to.rc.onReceive()) {
      overruns++;
      if (msg.kind === 'data') to.received++; // lost, but counted so the run can end
      return;
    }
    if (msg.credits > 0 && enforced) to.credits.grant(msg.credits);
    if (msg.kind === 'update') to.rc.releaseUpdate();
    else {
      to.held++;
      to.received++;
    }
  };

  const check = (): void => {
    if (!enforced) return;
    for (const [s, peer] of [
      [a, b],
      [b, a],
    ] as const) {
      const inFlight = s.out.length;
      const sum = s.credits.available + inFlight + peer.rc.inUse + peer.rc.unreturned;
      // Credits in flight inside messages toward s are owed-and-taken: count them too.
      const returning = peer.out.reduce((acc, m) => acc + m.credits, 0);
      if (sum + returning !== cfg.credits) conserved = false;
    }
  };

  react(a);
  react(b);
  check();
  let steps = 0;
  for (; steps < maxSteps; steps++) {
    const enabled: (() => void)[] = [];
    if (a.out.length > 0) enabled.push(() => deliver(a, b));
    if (b.out.length > 0) enabled.push(() => deliver(b, a));
    if (releasable(a)) enabled.push(() => release(a));
    if (releasable(b)) enabled.push(() => release(b));
    if (flush && a.clock.pendingTimers > 0) enabled.push(() => a.clock.runNext());
    if (flush && b.clock.pendingTimers > 0) enabled.push(() => b.clock.runNext());
    if (enabled.length === 0) break;
    const pick = choices[steps] ?? 0;
    (enabled[pick % enabled.length] as () => void)();
    react(a);
    react(b);
    check();
  }

  function releasable(s: Side): boolean {
    return s.held > 0 && (s.held >= group || s.received === cfg.messages);
  }

  function release(s: Side): void {
    s.held--;
    s.rc.release(1);
  }

  const done =
    a.toSend === 0 && b.toSend === 0 && a.received === cfg.messages && b.received === cfg.messages;
  const outcome: BidiOutcome = steps >= maxSteps ? 'livelock' : done ? 'completed' : 'deadlock';
  return { outcome, steps, overruns, updates, minAvailable, conserved };
}
