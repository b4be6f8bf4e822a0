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
 */
import { ReceiveCredits, SendCredits } from '../../src/index.js';

export interface BidiConfig {
  messages: number;
  credits: number;
  returnThreshold?: number;
  /** Data keeps the reserved credit back (the package's rule). False: the ablation. */
  reserve: boolean;
  /** Senders honour credits at all. False: the no-flow-control ablation. */
  creditsEnforced?: boolean;
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
  const mk = (): Side => ({
    credits: new SendCredits({ initialCredits: cfg.credits }),
    rc: new ReceiveCredits({
      initialCredits: cfg.credits,
      ...(cfg.returnThreshold === undefined ? {} : { returnThreshold: cfg.returnThreshold }),
    }),
    toSend: cfg.messages,
    held: 0,
    out: [],
    received: 0,
  });
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
    if (msg.kind === 'update') to.rc.release(1);
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
    if (a.held > 0) enabled.push(() => release(a));
    if (b.held > 0) enabled.push(() => release(b));
    if (enabled.length === 0) break;
    const pick = choices[steps] ?? 0;
    (enabled[pick % enabled.length] as () => void)();
    react(a);
    react(b);
    check();
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
