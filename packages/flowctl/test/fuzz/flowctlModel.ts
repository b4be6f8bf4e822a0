// biome-ignore-all lint/correctness/noVoidTypeReturn: `return expect…(...)` ends a command once its outcome is checked
// Over 500 lines on purpose: one model, and the commands that drive it, read together.
// Model-based fuzzing of flowctl's public surface (issue 17): random sequences of acquire /
// tryAcquire / release / grant / consume / receive / close / destroy / abort / clock advance,
// with hostile arguments, on a ManualClock. After every call: the result is what the model
// predicts or a FlowctlError with a documented code; nothing waits past its deadline; and the
// model and the objects agree on state. SendCredits and ReceiveCredits are modelled exactly;
// for SendWindow + SharedBudget (deficit round-robin) the model checks the bounds, the books,
// the deadlines and that nothing is left queued while it could go.
import fc from 'fast-check';
import {
  FlowctlError,
  type FlowctlErrorCode,
  ManualClock,
  ReceiveCredits,
  SendCredits,
  SendWindow,
  SharedBudget,
} from '../../src/index.js';

export const DOCUMENTED_CODES: readonly FlowctlErrorCode[] = [
  'ERR_FLOWCTL_INVALID_ARG',
  'ERR_FLOWCTL_TOO_LARGE',
  'ERR_FLOWCTL_DEADLINE',
  'ERR_FLOWCTL_ABORTED',
  'ERR_FLOWCTL_CLOSED',
  'ERR_FLOWCTL_QUEUE_FULL',
  'ERR_FLOWCTL_PROTOCOL',
];

export const coverage = new Map<string, number>();
function reached(what: string): void {
  coverage.set(what, (coverage.get(what) ?? 0) + 1);
}

const HOSTILE: readonly unknown[] = [
  null,
  '8',
  '',
  -1,
  1.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  2 ** 53,
  3n,
  {},
  [],
  () => 1,
  Symbol('s'),
];
const hostile = fc.constantFrom(...HOSTILE);

function show(v: unknown): string {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'symbol' || typeof v === 'function') return String(v);
  return JSON.stringify(v) ?? 'undefined';
}

function fail(what: string, detail: string): never {
  throw new Error(`${what}: ${detail}`);
}

type Outcome<T> = { ok: true; value: T } | { ok: false; err: FlowctlError };

/** Runs `fn`; a throw must be a FlowctlError with a documented code. */
function attempt<T>(what: string, fn: () => T): Outcome<T> {
  try {
    return { ok: true, value: fn() };
  } catch (err) {
    if (!(err instanceof FlowctlError)) {
      throw new Error(`${what} threw a non-FlowctlError: ${String(err)}`, { cause: err });
    }
    if (!DOCUMENTED_CODES.includes(err.code)) fail(what, `undocumented code ${err.code}`);
    reached(`throw ${err.code}`);
    return { ok: false, err };
  }
}

function expectErr(what: string, r: Outcome<unknown>, code: FlowctlErrorCode): void {
  if (r.ok) fail(what, `expected ${code}, returned ${show(r.value)}`);
  if (r.err.code !== code) fail(what, `expected ${code}, got ${r.err.code}: ${r.err.message}`);
}

function expectOk<T>(what: string, r: Outcome<T>): T {
  if (!r.ok) fail(what, `expected success, got ${r.err.code}: ${r.err.message}`);
  return r.value;
}

const isInt = (v: unknown, min: number, max = Number.MAX_SAFE_INTEGER): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;

// ---- waits ------------------------------------------------------------------------------

/** One awaited acquire, as the model sees it. */
interface Wait {
  readonly id: number;
  readonly bytes: number;
  readonly deadline: number;
  readonly signal: number | undefined;
  /** Window waits: which window; credit waits: -1. */
  readonly window: number;
  state: 'pending' | 'resolved' | 'rejected';
  code: FlowctlErrorCode | undefined;
  /** The settlement seen but not yet accounted for by the model. */
  seen: 'resolved' | 'rejected' | undefined;
  seenCode: FlowctlErrorCode | undefined;
  /** Window waits: the message's bytes are in flight until released. */
  releasedBack: boolean;
  /** Queued (not settled by the call itself): its rejection is a queued waiter's. */
  queued: boolean;
}

function observe(w: Wait, p: Promise<void>): void {
  p.then(
    () => {
      w.seen = 'resolved';
    },
    (err: unknown) => {
      w.seen = 'rejected';
      w.seenCode = err instanceof FlowctlError ? err.code : undefined;
      if (!(err instanceof FlowctlError)) w.seenCode = 'NOT_A_FLOWCTL_ERROR' as FlowctlErrorCode;
    },
  );
}

/** Lets every settlement reaction run (a macrotask: every microtask before it has run). */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

// ---- model and real objects -------------------------------------------------------------

export interface FlowConfig {
  readonly windows: ReadonlyArray<{
    maxBytes: number;
    maxMessages: number;
    maxQueued: number;
    budget: boolean;
  }>;
  readonly budget: { maxBytes: number; maxMessages: number };
  readonly credits: { initialCredits: number; reservedCredits: number; maxWaiters: number };
  readonly receive: {
    initialCredits: number;
    reservedCredits: number;
    returnThreshold: number;
    maxGrant: number;
  };
  readonly quantumBytes: number;
}

interface WindowModel {
  state: 'open' | 'closed' | 'destroyed';
  /** Bytes of each message in flight (granted, not released). */
  /** Bytes and messages in flight, as the window counts them (release(bytes) takes one message). */
  bytes: number;
  msgs: number;
  /** Sizes granted and not yet released: what a well-behaved release() names. */
  readonly sizes: number[];
  readonly maxBytes: number;
  readonly maxMessages: number;
  readonly maxQueued: number;
  readonly budget: boolean;
}

export interface Model {
  readonly cfg: FlowConfig;
  readonly windows: WindowModel[];
  readonly waits: Wait[];
  credits: { state: 'open' | 'closed' | 'destroyed'; avail: number };
  receive: {
    state: 'open' | 'closed';
    used: number;
    owed: number;
    /** The part of `owed` from data buffers, and the flush delay's state (timer due at). */
    owedData: number;
    echoArmed: boolean;
    flushAt: number | undefined;
    flushDue: boolean;
    updates: number;
    received: number;
    returned: number;
  };
  /** Aborted signals (controller * 1000 + generation). */
  readonly aborted: Set<number>;
  /** Generation of each controller (renewed after an abort). */
  readonly gen: number[];
  readonly trail: string[];
}

export interface Real {
  readonly clock: ManualClock;
  readonly budget: SharedBudget;
  readonly windows: SendWindow[];
  readonly credits: SendCredits;
  readonly receive: ReceiveCredits;
  controllers: AbortController[];
  updatesSignalled: number;
}

const budgetBytes = (m: Model): number =>
  m.windows.reduce(
    (n, w, i) => n + (m.cfg.windows[i]?.budget && w.state !== 'destroyed' ? w.bytes : 0),
    0,
  );
const budgetMessages = (m: Model): number =>
  m.windows.reduce(
    (n, w, i) => n + (m.cfg.windows[i]?.budget && w.state !== 'destroyed' ? w.msgs : 0),
    0,
  );

function maxMessageBytes(m: Model, i: number): number {
  const w = m.windows[i] as WindowModel;
  return w.budget ? Math.min(w.maxBytes, m.cfg.budget.maxBytes) : w.maxBytes;
}

function grant(w: WindowModel, bytes: number): void {
  w.bytes += bytes;
  w.msgs++;
  w.sizes.push(bytes);
}

function pendingOf(m: Model, window: number): Wait[] {
  return m.waits.filter((w) => w.window === window && w.state === 'pending');
}

/** Takes in what the promises did since the last command; checks each settlement was allowed. */
function absorb(m: Model, r: Real): void {
  const now = r.clock.now();
  for (const w of m.waits) {
    if (w.state !== 'pending' || w.seen === undefined) continue;
    const what = `wait#${w.id}`;
    if (w.seen === 'resolved') {
      w.state = 'resolved';
      reached(w.window < 0 ? 'credit wait granted' : 'window wait granted');
      if (w.window >= 0) grant(m.windows[w.window] as WindowModel, w.bytes);
      else fail(what, 'a credit wait resolved without the model granting it');
      continue;
    }
    w.state = 'rejected';
    w.code = w.seenCode;
    reached(`wait ${w.code}`);
    if (w.queued) reached(`queued wait ${w.code}`);
    switch (w.seenCode) {
      case 'ERR_FLOWCTL_DEADLINE':
        if (now < w.deadline) fail(what, `rejected at ${now}, before its deadline ${w.deadline}`);
        break;
      case 'ERR_FLOWCTL_ABORTED':
        if (w.signal === undefined || !m.aborted.has(w.signal))
          fail(what, 'aborted without its signal');
        break;
      case 'ERR_FLOWCTL_CLOSED': {
        const st = w.window < 0 ? m.credits.state : (m.windows[w.window] as WindowModel).state;
        if (st === 'open') fail(what, 'closed-rejection of an open object');
        break;
      }
      default:
        // destroy(err) rejects with the caller's error: the fuzz passes FlowctlErrors only.
        if (w.seenCode !== 'ERR_FLOWCTL_PROTOCOL')
          fail(what, `rejected with ${String(w.seenCode)}`);
    }
  }
}

/** The invariants after every command. */
export function agree(m: Model, r: Real): void {
  const now = r.clock.now();
  // Nothing waits past its deadline.
  for (const w of m.waits) {
    if (w.state === 'pending' && w.deadline <= now)
      fail(`wait#${w.id}`, `still pending at ${now}, deadline ${w.deadline}`);
  }
  // Windows: books, bounds, liveness.
  for (let i = 0; i < m.windows.length; i++) {
    const w = m.windows[i] as WindowModel;
    const real = r.windows[i] as SendWindow;
    const what = `window${i}`;
    if (real.state !== w.state) fail(what, `state ${real.state}, model ${w.state}`);
    const bytes = w.state === 'destroyed' ? 0 : w.bytes;
    const msgs = w.state === 'destroyed' ? 0 : w.msgs;
    if (real.bytesInFlight !== bytes || real.messagesInFlight !== msgs) {
      fail(
        what,
        `in flight ${real.bytesInFlight} B / ${real.messagesInFlight}, model ${bytes} B / ${msgs}`,
      );
    }
    if (bytes > w.maxBytes || msgs > w.maxMessages) fail(what, 'over its window');
    const pending = pendingOf(m, i);
    if (real.queued !== pending.length)
      fail(what, `queued ${real.queued}, model ${pending.length}`);
    if (pending.length > w.maxQueued) fail(what, 'queue over maxQueued');
    const budgetIdle = !w.budget || (budgetBytes(m) === 0 && budgetMessages(m) === 0);
    if (pending.length > 0 && msgs === 0 && budgetIdle)
      fail(what, 'sends queued while the window and budget are empty');
  }
  const bb = budgetBytes(m);
  const bm = budgetMessages(m);
  if (r.budget.bytesInFlight !== bb || r.budget.messagesInFlight !== bm) {
    fail(
      'budget',
      `${r.budget.bytesInFlight} B / ${r.budget.messagesInFlight}, model ${bb} B / ${bm}`,
    );
  }
  if (bb > m.cfg.budget.maxBytes || bm > m.cfg.budget.maxMessages)
    fail('budget', 'over the budget');
  // Credits: exact.
  const c = r.credits;
  if (c.state !== m.credits.state) fail('credits', `state ${c.state}, model ${m.credits.state}`);
  if (c.available !== m.credits.avail)
    fail('credits', `available ${c.available}, model ${m.credits.avail}`);
  const cw = pendingOf(m, -1).length;
  if (c.stats().waiting !== (m.credits.state === 'open' ? cw : 0))
    fail('credits', `waiting ${c.stats().waiting}, model ${cw}`);
  if (c.available < 0 || c.available > m.cfg.credits.initialCredits)
    fail('credits', 'out of range');
  // Receive credits: exact.
  flushTimerDue(m, r);
  const rc = r.receive;
  const mr = m.receive;
  if (rc.state !== mr.state || rc.inUse !== mr.used || rc.unreturned !== mr.owed) {
    fail(
      'receive',
      `state ${rc.state} inUse ${rc.inUse} owed ${rc.unreturned}, model ${mr.state} ${mr.used} ${mr.owed}`,
    );
  }
  if (rc.posted + rc.inUse !== rc.capacity) fail('receive', 'posted + inUse != capacity');
  if (mr.state === 'open' && rc.updateNeeded !== updateNeeded(m))
    fail('receive', `updateNeeded ${rc.updateNeeded}, model ${updateNeeded(m)}`);
  if (r.updatesSignalled !== mr.updates)
    fail('receive', `onUpdateNeeded ${r.updatesSignalled}, model ${mr.updates}`);
}

/** ReceiveCredits' flush delay in the fuzzed configuration. */
const FLUSH_DELAY = 5;

function updateNeeded(m: Model): boolean {
  return m.receive.owed >= m.cfg.receive.returnThreshold || m.receive.flushDue;
}

/** The flush delay's timer fired if the clock passed it (whichever command moved the clock). */
function flushTimerDue(m: Model, r: Real): void {
  const mr = m.receive;
  if (mr.flushAt === undefined || r.clock.now() < mr.flushAt) return;
  mr.flushAt = undefined;
  if (mr.state === 'open' && (mr.owedData > 0 || mr.echoArmed)) {
    if (!updateNeeded(m)) mr.updates++;
    mr.flushDue = true;
    reached('delayed credit flush');
  }
}

function dataReturned(mr: Model['receive'], n: number): void {
  mr.owedData -= n;
  if (mr.owedData === 0 && !mr.echoArmed) {
    mr.flushAt = undefined;
    mr.flushDue = false;
  }
}

// ---- commands -----------------------------------------------------------------------------

type Cmd = fc.AsyncCommand<Model, Real>;

/** Timeouts and deadlines: small ones that fire during the run, far ones, hostile ones. */
interface WaitArgs {
  readonly timeoutMs: unknown;
  readonly deadline: unknown;
  readonly signal: number | 'hostile' | undefined;
  readonly channel: unknown;
  readonly asOptions: 'object' | 'undefined' | 'hostile';
  readonly hostileOptions: unknown;
}
const waitArgsArb: fc.Arbitrary<WaitArgs> = fc.record({
  timeoutMs: fc.oneof(
    { weight: 2, arbitrary: fc.constant(undefined) },
    { weight: 6, arbitrary: fc.integer({ min: 0, max: 200 }) },
    { weight: 1, arbitrary: fc.constantFrom(2 ** 31, 2 ** 40, Number.MAX_SAFE_INTEGER) },
    { weight: 1, arbitrary: hostile },
  ),
  deadline: fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.integer({ min: -10, max: 300 }) },
    { weight: 1, arbitrary: hostile },
  ),
  signal: fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.nat({ max: 3 }) },
    { weight: 1, arbitrary: fc.constant('hostile' as const) },
  ),
  channel: fc.oneof(
    { weight: 6, arbitrary: fc.nat({ max: 2 }) },
    { weight: 2, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constantFrom<unknown>(-1, 2 ** 32, 1.5, '1', null) },
  ),
  asOptions: fc.constantFrom(
    'object' as const,
    'object' as const,
    'object' as const,
    'undefined' as const,
    'hostile' as const,
  ),
  hostileOptions: fc.constantFrom<unknown>(null, 'opts', 5, [], new Map()),
});

const DEFAULT_TIMEOUT = 1000;

/** Builds the options of an acquire, and what the model makes of them (or 'invalid'). */
function waitOptions(
  a: WaitArgs,
  r: Real,
  now: number,
  withChannel: boolean,
): { options: unknown; deadline: number | 'invalid' } {
  if (a.asOptions === 'undefined') return { options: undefined, deadline: now + DEFAULT_TIMEOUT };
  if (a.asOptions === 'hostile') return { options: a.hostileOptions, deadline: 'invalid' };
  const o: Record<string, unknown> = {};
  if (a.timeoutMs !== undefined) o.timeoutMs = a.timeoutMs;
  if (a.deadline !== undefined) o.deadline = a.deadline;
  if (a.signal !== undefined)
    o.signal = a.signal === 'hostile' ? { aborted: false } : r.controllers[a.signal]?.signal;
  if (withChannel && a.channel !== undefined) o.channel = a.channel;
  // channel ?? 0: null is the default channel.
  const channelGiven = a.channel !== undefined && a.channel !== null;
  if (withChannel && channelGiven && !isInt(a.channel, 0, 0xffffffff))
    return { options: o, deadline: 'invalid' };
  if (a.signal === 'hostile') return { options: o, deadline: 'invalid' };
  let deadline = Number.POSITIVE_INFINITY;
  if (a.timeoutMs !== undefined && a.timeoutMs !== null) {
    if (typeof a.timeoutMs !== 'number' || !Number.isFinite(a.timeoutMs) || a.timeoutMs < 0)
      return { options: o, deadline: 'invalid' };
    deadline = now + a.timeoutMs;
  }
  if (a.deadline !== undefined && a.deadline !== null) {
    if (typeof a.deadline !== 'number' || !Number.isFinite(a.deadline))
      return { options: o, deadline: 'invalid' };
    if (a.deadline < deadline) deadline = a.deadline;
  }
  // null counts as given-but-empty only for the `!== undefined` checks of the real code.
  if (a.timeoutMs === null || a.deadline === null) return { options: o, deadline: 'invalid' };
  return {
    options: o,
    deadline: deadline === Number.POSITIVE_INFINITY ? now + DEFAULT_TIMEOUT : deadline,
  };
}

let nextWaitId = 1;

/** The controller whose signal the options carry (only when options were an object). */
function signalOf(a: WaitArgs, m: Model): number | undefined {
  return a.asOptions === 'object' && typeof a.signal === 'number'
    ? a.signal * 1000 + (m.gen[a.signal] as number)
    : undefined;
}

class WindowAcquireCmd implements Cmd {
  constructor(
    readonly i: number,
    readonly bytes: unknown,
    readonly args: WaitArgs,
    readonly tryOnly: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const i = this.i % m.windows.length;
    const w = m.windows[i] as WindowModel;
    const win = r.windows[i] as SendWindow;
    const now = r.clock.now();
    const what = `window${i}.${this.tryOnly ? 'tryAcquire' : 'acquire'}(${show(this.bytes)})`;
    m.trail.push(what);
    const { options, deadline } = waitOptions(this.args, r, now, true);
    const queued = pendingOf(m, i).length;
    const othersQueued = m.windows.some(
      (_, j) => j !== i && m.cfg.windows[j]?.budget && pendingOf(m, j).length > 0,
    );
    const fitsWindow =
      typeof this.bytes === 'number' &&
      w.msgs < w.maxMessages &&
      this.bytes <= w.maxBytes - w.bytes;
    const fitsBudget =
      !w.budget ||
      (typeof this.bytes === 'number' &&
        budgetMessages(m) < m.cfg.budget.maxMessages &&
        this.bytes <= m.cfg.budget.maxBytes - budgetBytes(m));
    const res = attempt(what, () =>
      this.tryOnly
        ? win.tryAcquire(this.bytes as number)
        : win.acquire(this.bytes as number, options as never),
    );
    if (w.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
    if (!isInt(this.bytes, 0)) return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
    if (this.bytes > maxMessageBytes(m, i)) return expectErr(what, res, 'ERR_FLOWCTL_TOO_LARGE');
    if (!this.tryOnly && deadline === 'invalid')
      return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
    const value = expectOk(what, res);
    const mustGo = queued === 0 && fitsWindow && fitsBudget && !othersQueued;
    const cannotGo = queued > 0 || !fitsWindow || !fitsBudget;
    if (this.tryOnly) {
      if (mustGo && value !== true) fail(what, 'refused although it fits and nothing is queued');
      if (cannotGo && value !== false)
        fail(what, 'granted although it does not fit or others queue');
      if (value === true) {
        grant(w, this.bytes);
        reached('tryAcquire granted');
      } else reached('tryAcquire refused');
      return;
    }
    const wait: Wait = {
      id: nextWaitId++,
      bytes: this.bytes,
      deadline: deadline as number,
      signal: signalOf(this.args, m),
      window: i,
      state: 'pending',
      code: undefined,
      seen: undefined,
      seenCode: undefined,
      releasedBack: false,
      queued: false,
    };
    m.waits.push(wait);
    observe(wait, value as Promise<void>);
    await flush();
    // At once: the fast path, or one of the immediate rejections, or queued.
    if (mustGo && wait.seen !== 'resolved')
      fail(what, 'did not go at once although it fits and nothing is queued');
    const aborted = wait.signal !== undefined && m.aborted.has(wait.signal);
    if (wait.seen === undefined) {
      // Queued: none of the immediate rejections applied.
      if (aborted) fail(what, 'queued with an aborted signal');
      if (queued >= w.maxQueued) fail(what, `queued beyond maxQueued ${w.maxQueued}`);
      if ((deadline as number) <= now) fail(what, 'queued with its deadline passed');
      reached('window wait queued');
      wait.queued = true;
    }
    if (wait.seen === 'rejected') {
      const code = wait.seenCode;
      if (code === 'ERR_FLOWCTL_ABORTED') {
        if (!aborted) fail(what, 'aborted without an aborted signal');
        reached('window acquire ERR_FLOWCTL_ABORTED');
      }
      if (code === 'ERR_FLOWCTL_QUEUE_FULL') {
        if (queued < w.maxQueued) fail(what, `queue full with ${queued} of ${w.maxQueued}`);
        wait.state = 'rejected';
        wait.code = code;
        reached('wait ERR_FLOWCTL_QUEUE_FULL');
      }
      if (code === 'ERR_FLOWCTL_DEADLINE' && (deadline as number) > now)
        fail(what, 'deadline rejection before the deadline');
    }
  }
  toString(): string {
    return `window${this.i}.${this.tryOnly ? 'tryAcquire' : 'acquire'}(${show(this.bytes)})`;
  }
}

class WindowReleaseCmd implements Cmd {
  constructor(
    readonly i: number,
    readonly pickMsg: number,
    readonly hostileBytes: unknown,
    readonly useHostile: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const i = this.i % m.windows.length;
    const w = m.windows[i] as WindowModel;
    const k = w.sizes.length === 0 ? -1 : this.pickMsg % w.sizes.length;
    const bytes = this.useHostile || k < 0 ? this.hostileBytes : w.sizes[k];
    const what = `window${i}.release(${show(bytes)})`;
    m.trail.push(what);
    const res = attempt(what, () => (r.windows[i] as SendWindow).release(bytes as number));
    if (w.state === 'destroyed') return expectOk(what, res);
    // The last message in flight must give back every byte still counted.
    if (!isInt(bytes, 0, w.bytes) || w.msgs === 0 || (w.msgs === 1 && bytes !== w.bytes)) {
      return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
    }
    expectOk(what, res);
    w.bytes -= bytes;
    w.msgs--;
    const at = w.sizes.indexOf(bytes);
    if (at >= 0) w.sizes.splice(at, 1);
    reached('window release');
    await flush();
  }
  toString(): string {
    return `window${this.i}.release`;
  }
}

class WindowCloseCmd implements Cmd {
  constructor(
    readonly i: number,
    readonly how: 'close' | 'destroy' | 'destroy-err' | 'destroy-hostile' | 'dispose',
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const i = this.i % m.windows.length;
    const w = m.windows[i] as WindowModel;
    const win = r.windows[i] as SendWindow;
    const what = `window${i}.${this.how}()`;
    m.trail.push(what);
    const res = attempt(what, () => {
      if (this.how === 'close') win.close();
      else if (this.how === 'dispose') void win[Symbol.asyncDispose]();
      else if (this.how === 'destroy') win.destroy();
      else if (this.how === 'destroy-err')
        win.destroy(new FlowctlError('ERR_FLOWCTL_PROTOCOL', 'peer gone'));
      else win.destroy('not an error' as never);
    });
    if (this.how === 'destroy-hostile') return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
    expectOk(what, res);
    if (this.how === 'close' || this.how === 'dispose') {
      if (w.state === 'open') w.state = 'closed';
    } else {
      w.state = 'destroyed';
      w.bytes = 0;
      w.msgs = 0;
      w.sizes.length = 0;
    }
    reached(`window ${this.how}`);
    await flush();
  }
  toString(): string {
    return `window${this.i}.${this.how}()`;
  }
}

class CreditCmd implements Cmd {
  constructor(
    readonly how:
      | 'tryConsume'
      | 'tryConsumeReserved'
      | 'acquire'
      | 'grant'
      | 'close'
      | 'destroy'
      | 'destroy-hostile',
    readonly n: unknown,
    readonly args: WaitArgs,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const c = m.credits;
    const sc = r.credits;
    const reserved = m.cfg.credits.reservedCredits;
    const total = m.cfg.credits.initialCredits;
    const what = `credits.${this.how}(${this.how === 'grant' ? show(this.n) : ''})`;
    m.trail.push(what);
    const waiting = pendingOf(m, -1);
    const now = r.clock.now();
    switch (this.how) {
      case 'tryConsume': {
        const res = attempt(what, () => sc.tryConsume());
        if (c.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
        const go = waiting.length === 0 && c.avail > reserved;
        if (expectOk(what, res) !== go) fail(what, `returned ${!go}, model ${go}`);
        if (go) c.avail--;
        return;
      }
      case 'tryConsumeReserved': {
        const res = attempt(what, () => sc.tryConsumeReserved());
        if (c.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
        const go = c.avail > 0;
        if (expectOk(what, res) !== go) fail(what, `returned ${!go}, model ${go}`);
        if (go) c.avail--;
        return;
      }
      case 'grant': {
        const res = attempt(what, () => sc.grant(this.n as number));
        if (c.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
        if (!isInt(this.n, 0)) return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
        if (c.avail + this.n > total) return expectErr(what, res, 'ERR_FLOWCTL_PROTOCOL');
        expectOk(what, res);
        c.avail += this.n;
        // FIFO: waiters are served in order while a data credit is free.
        for (const w of waiting) {
          if (c.avail <= reserved) break;
          c.avail--;
          w.state = 'resolved';
          w.seen = undefined;
          reached('credit wait granted');
          (w as { expectResolve?: boolean }).expectResolve = true;
        }
        await flush();
        for (const w of waiting) {
          const expected = (w as { expectResolve?: boolean }).expectResolve === true;
          if (expected !== (w.seen === 'resolved'))
            fail(
              what,
              `wait#${w.id} ${w.seen ?? 'pending'}, model ${expected ? 'resolved' : 'pending'}`,
            );
          if (expected) w.seen = undefined;
        }
        return;
      }
      case 'acquire': {
        const { options, deadline } = waitOptions(this.args, r, now, false);
        const res = attempt(what, () => sc.acquire(options as never));
        if (c.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
        if (deadline === 'invalid') return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
        const p = expectOk(what, res);
        const signal = signalOf(this.args, m);
        const wait: Wait = {
          id: nextWaitId++,
          bytes: 1,
          deadline,
          signal,
          window: -1,
          state: 'pending',
          code: undefined,
          seen: undefined,
          seenCode: undefined,
          releasedBack: false,
          queued: false,
        };
        observe(wait, p);
        await flush();
        let expect: 'resolved' | FlowctlErrorCode | 'pending';
        if (waiting.length === 0 && c.avail > reserved) expect = 'resolved';
        else if (signal !== undefined && m.aborted.has(signal)) expect = 'ERR_FLOWCTL_ABORTED';
        else if (waiting.length >= m.cfg.credits.maxWaiters) expect = 'ERR_FLOWCTL_QUEUE_FULL';
        else if (deadline <= now) expect = 'ERR_FLOWCTL_DEADLINE';
        else expect = 'pending';
        const got =
          wait.seen === undefined
            ? 'pending'
            : wait.seen === 'resolved'
              ? 'resolved'
              : wait.seenCode;
        if (got !== expect) fail(what, `${String(got)}, model ${expect}`);
        reached(`credit acquire ${expect}`);
        if (expect === 'resolved') c.avail--;
        if (expect === 'pending') {
          wait.queued = true;
          m.waits.push(wait);
        }
        return;
      }
      case 'close':
      case 'destroy': {
        expectOk(
          what,
          attempt(what, () => (this.how === 'close' ? sc.close() : sc.destroy())),
        );
        if (c.state === 'open') {
          for (const w of waiting) (w as { expectClosed?: boolean }).expectClosed = true;
        }
        if (this.how === 'close') {
          if (c.state === 'open') c.state = 'closed';
        } else c.state = 'destroyed';
        await flush();
        return;
      }
      case 'destroy-hostile':
        return expectErr(
          what,
          attempt(what, () => sc.destroy(42 as never)),
          'ERR_FLOWCTL_INVALID_ARG',
        );
    }
  }
  toString(): string {
    return `credits.${this.how}(${show(this.n)})`;
  }
}

class ReceiveCmd implements Cmd {
  constructor(
    readonly how:
      | 'onReceive'
      | 'release'
      | 'releaseUpdate'
      | 'takePiggyback'
      | 'takeUpdate'
      | 'close'
      | 'params',
    readonly n: unknown,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    const mr = m.receive;
    const rc = r.receive;
    const cfg = m.cfg.receive;
    const what = `receive.${this.how}(${this.how === 'release' ? show(this.n) : ''})`;
    m.trail.push(what);
    if (this.how === 'close') {
      expectOk(
        what,
        attempt(what, () => rc.close()),
      );
      mr.state = 'closed';
      mr.flushAt = undefined;
      mr.flushDue = false;
      return;
    }
    if (this.how === 'params') {
      const p = expectOk(
        what,
        attempt(what, () => rc.params()),
      );
      if (p.initialCredits !== cfg.initialCredits || p.returnThreshold !== cfg.returnThreshold)
        fail(what, 'params changed');
      return;
    }
    const res = attempt(what, (): unknown => {
      if (this.how === 'onReceive') return rc.onReceive();
      if (this.how === 'release')
        return this.n === undefined ? rc.release() : rc.release(this.n as number);
      if (this.how === 'releaseUpdate') return rc.releaseUpdate();
      if (this.how === 'takePiggyback') return rc.takePiggyback();
      return rc.takeUpdate();
    });
    if (mr.state !== 'open') return expectErr(what, res, 'ERR_FLOWCTL_CLOSED');
    if (this.how === 'onReceive') {
      // A burst: n arrivals (the first already made above).
      const burst = isInt(this.n, 1, 4) ? this.n : 1;
      for (let k = 0; k < burst; k++) {
        const got = k === 0 ? res : attempt(what, () => rc.onReceive());
        const ok = mr.used < cfg.initialCredits;
        if (expectOk(what, got) !== ok) fail(what, `returned ${!ok}, model ${ok}`);
        if (!ok) {
          reached('overrun');
          continue;
        }
        // A message sent without a credit forfeits one owed credit (never more credits than buffers).
        if (cfg.initialCredits + mr.returned - mr.received <= 0 && mr.owed > 0) {
          mr.owed--;
          if (mr.owed === 0) mr.echoArmed = false;
          dataReturned(mr, Math.max(0, mr.owedData - mr.owed));
        }
        mr.used++;
        mr.received++;
      }
      return;
    }
    if (this.how === 'release') {
      const count = this.n === undefined ? 1 : this.n;
      if (!isInt(count, 1, mr.used)) return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
      expectOk(what, res);
      const before = updateNeeded(m);
      mr.used -= count;
      mr.owed += count;
      mr.owedData += count;
      if (mr.flushAt === undefined && !mr.flushDue) mr.flushAt = r.clock.now() + FLUSH_DELAY;
      if (!before && updateNeeded(m)) mr.updates++;
      return;
    }
    if (this.how === 'releaseUpdate') {
      if (mr.used === 0) return expectErr(what, res, 'ERR_FLOWCTL_INVALID_ARG');
      expectOk(what, res);
      const before = updateNeeded(m);
      mr.used--;
      mr.owed++;
      const peerStalled = cfg.initialCredits + mr.returned - mr.received <= cfg.reservedCredits;
      if (!mr.echoArmed && peerStalled) {
        mr.echoArmed = true;
        if (mr.flushAt === undefined && !mr.flushDue) mr.flushAt = r.clock.now() + FLUSH_DELAY;
        reached('update credits armed');
      }
      if (!before && updateNeeded(m)) mr.updates++;
      return;
    }
    const n = Math.min(mr.owed, cfg.maxGrant);
    const got = expectOk(what, res);
    if (got !== n) fail(what, `returned ${String(got)}, model ${n}`);
    mr.owed -= n;
    if (mr.owed === 0) mr.echoArmed = false;
    dataReturned(mr, Math.min(n, mr.owedData));
    mr.returned += n;
    if (n > 0) reached('credits returned');
  }
  toString(): string {
    return `receive.${this.how}(${show(this.n)})`;
  }
}

class AdvanceCmd implements Cmd {
  constructor(readonly ms: number) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    m.trail.push(`advance(${this.ms})`);
    r.clock.advance(this.ms);
    flushTimerDue(m, r);
    await flush();
    reached('advance');
  }
  toString(): string {
    return `advance(${this.ms})`;
  }
}

class AbortCmd implements Cmd {
  constructor(
    readonly k: number,
    readonly renew: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model, r: Real): Promise<void> {
    m.trail.push(`abort(${this.k}${this.renew ? ', renew' : ''})`);
    r.controllers[this.k]?.abort(new Error('user abort'));
    m.aborted.add(this.k * 1000 + (m.gen[this.k] as number));
    // A fresh controller for later waits (or keep the aborted one: waits given it fail at once).
    if (this.renew) {
      r.controllers[this.k] = new AbortController();
      m.gen[this.k] = (m.gen[this.k] as number) + 1;
    }
    await flush();
  }
  toString(): string {
    return `abort(${this.k})`;
  }
}

/** The constructors' rules, written out independently (`null` and `undefined` mean the default). */
function validOptions(kind: string, options: unknown): boolean {
  if (
    typeof options !== 'object' ||
    options === null ||
    Object.prototype.toString.call(options) !== '[object Object]'
  ) {
    return false;
  }
  const o = options as Record<string, unknown>;
  const int = (v: unknown, min: number, dflt?: number): number | undefined =>
    v === undefined || v === null ? dflt : isInt(v, min) ? v : undefined;
  const finite = (v: unknown, dflt: number): boolean =>
    v === undefined || v === null
      ? true
      : typeof v === 'number' && Number.isFinite(v) && v >= 0 && dflt >= 0;
  const clockOk = o.clock === undefined;
  switch (kind) {
    case 'SharedBudget':
      return (
        int(o.maxBytes, 1) !== undefined &&
        int(o.maxMessages, 1) !== undefined &&
        int(o.quantumBytes, 1, 1) !== undefined
      );
    case 'SendWindow':
      return (
        int(o.maxBytes, 1) !== undefined &&
        int(o.maxMessages, 1) !== undefined &&
        int(o.quantumBytes, 1, 1) !== undefined &&
        int(o.maxQueued, 0, 0) !== undefined &&
        finite(o.defaultTimeoutMs, 0) &&
        clockOk
      );
    case 'SendCredits': {
      const reserved = int(o.reservedCredits, 1, 1);
      return (
        reserved !== undefined &&
        int(o.initialCredits, reserved + 1) !== undefined &&
        int(o.maxWaiters, 0, 0) !== undefined &&
        finite(o.defaultTimeoutMs, 0) &&
        clockOk
      );
    }
    default: {
      const reserved = int(o.reservedCredits, 1, 1);
      if (reserved === undefined) return false;
      const total = int(o.initialCredits, reserved + 2);
      if (total === undefined) return false;
      const top = total - reserved;
      const t = int(o.returnThreshold, 2, Math.max(2, Math.floor(top / 2)));
      return t !== undefined && t <= top && clockOk;
    }
  }
}

/** Construction with hostile options: an object or ERR_FLOWCTL_INVALID_ARG, never a TypeError. */
class ConstructCmd implements Cmd {
  constructor(
    readonly kind: 'SendWindow' | 'SendCredits' | 'ReceiveCredits' | 'SharedBudget',
    readonly options: unknown,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: Model): Promise<void> {
    m.trail.push(`new ${this.kind}(...)`);
    const res = attempt(`new ${this.kind}`, () => {
      const o = this.options as never;
      if (this.kind === 'SendWindow') return new SendWindow(o);
      if (this.kind === 'SendCredits') return new SendCredits(o);
      if (this.kind === 'ReceiveCredits') return new ReceiveCredits(o);
      return new SharedBudget(o);
    });
    const valid = validOptions(this.kind, this.options);
    if (!valid) return expectErr(`new ${this.kind}`, res, 'ERR_FLOWCTL_INVALID_ARG');
    expectOk(`new ${this.kind}`, res);
    reached(`constructed ${this.kind}`);
  }
  toString(): string {
    return `new ${this.kind}(${show(this.options)})`;
  }
}

export function commands(): fc.Arbitrary<Cmd>[] {
  const win = fc.nat({ max: 2 });
  const bytes = fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 0, max: 2048 }) },
    { weight: 1, arbitrary: fc.integer({ min: 2048, max: 1 << 20 }) },
    { weight: 1, arbitrary: hostile },
  );
  const num = (max: number): fc.Arbitrary<unknown> =>
    fc.oneof(
      { weight: 5, arbitrary: fc.integer({ min: 0, max }) },
      { weight: 1, arbitrary: hostile },
    );
  const optionsArb = fc.oneof(
    fc.record(
      {
        maxBytes: num(4096),
        maxMessages: num(8),
        initialCredits: num(8),
        reservedCredits: num(3),
        returnThreshold: num(6),
        quantumBytes: num(4096),
        maxQueued: num(4),
        defaultTimeoutMs: num(100),
        clock: fc.constantFrom<unknown>(undefined, null, 'clock', {}),
      },
      { requiredKeys: [] },
    ),
    hostile,
  );
  const w = (weight: number, arbitrary: fc.Arbitrary<Cmd>) => ({ weight, arbitrary });
  // Weighted so that objects live long enough to reach their waits: closing is rare.
  return [
    fc.oneof(
      w(
        4,
        fc
          .tuple(win, bytes, waitArgsArb)
          .map(([i, b, a]): Cmd => new WindowAcquireCmd(i, b, a, false)),
      ),
      w(
        2,
        fc
          .tuple(win, bytes, waitArgsArb)
          .map(([i, b, a]): Cmd => new WindowAcquireCmd(i, b, a, true)),
      ),
      w(
        2,
        fc
          .tuple(win, fc.nat(), bytes, fc.boolean())
          .map(([i, k, h, u]): Cmd => new WindowReleaseCmd(i, k, h, u)),
      ),
      w(
        3,
        fc
          .tuple(win, fc.nat(), bytes)
          .map(([i, k, h]): Cmd => new WindowReleaseCmd(i, k, h, false)),
      ),
      w(
        1,
        fc
          .tuple(
            win,
            fc.constantFrom(
              'close' as const,
              'destroy' as const,
              'destroy-err' as const,
              'destroy-hostile' as const,
              'dispose' as const,
            ),
          )
          .map(([i, h]): Cmd => new WindowCloseCmd(i, h)),
      ),
      w(
        6,
        fc
          .tuple(
            fc.constantFrom(
              'tryConsume' as const,
              'tryConsume' as const,
              'tryConsumeReserved' as const,
              'acquire' as const,
              'acquire' as const,
              'grant' as const,
              'grant' as const,
            ),
            fc.oneof(
              { weight: 4, arbitrary: fc.integer({ min: 0, max: 4 }) },
              { weight: 1, arbitrary: hostile },
            ),
            waitArgsArb,
          )
          .map(([h, n, a]): Cmd => new CreditCmd(h, n, a)),
      ),
      w(
        1,
        fc
          .tuple(
            fc.constantFrom('close' as const, 'destroy' as const, 'destroy-hostile' as const),
            waitArgsArb,
          )
          .map(([h, a]): Cmd => new CreditCmd(h, 0, a)),
      ),
      w(
        4,
        fc
          .tuple(
            fc.constantFrom(
              'onReceive' as const,
              'onReceive' as const,
              'release' as const,
              'releaseUpdate' as const,
              'takePiggyback' as const,
              'takeUpdate' as const,
              'params' as const,
            ),
            fc.oneof(fc.constant(undefined), fc.integer({ min: 0, max: 4 }), hostile),
          )
          .map(([h, n]): Cmd => new ReceiveCmd(h, n)),
      ),
      w(1, fc.constant<Cmd>(new ReceiveCmd('close', undefined))),
      w(
        3,
        fc
          .oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 50, max: 400 }))
          .map((ms): Cmd => new AdvanceCmd(ms)),
      ),
      w(
        2,
        fc.tuple(fc.nat({ max: 3 }), fc.boolean()).map(([k, renew]): Cmd => new AbortCmd(k, renew)),
      ),
      w(
        1,
        fc
          .tuple(
            fc.constantFrom(
              'SendWindow' as const,
              'SendCredits' as const,
              'ReceiveCredits' as const,
              'SharedBudget' as const,
            ),
            optionsArb,
          )
          .map(([k, o]): Cmd => new ConstructCmd(k, o)),
      ),
    ),
  ];
}

export const configArb: fc.Arbitrary<FlowConfig> = fc
  .record({
    windows: fc.array(
      fc.record({
        maxBytes: fc.oneof(fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 1024, max: 4096 })),
        maxMessages: fc.integer({ min: 1, max: 6 }),
        maxQueued: fc.oneof(
          { weight: 1, arbitrary: fc.constant(0) },
          { weight: 4, arbitrary: fc.integer({ min: 1, max: 6 }) },
        ),
        budget: fc.boolean(),
      }),
      { minLength: 3, maxLength: 3 },
    ),
    budget: fc.record({
      maxBytes: fc.integer({ min: 1, max: 6144 }),
      maxMessages: fc.integer({ min: 1, max: 8 }),
    }),
    reserved: fc.integer({ min: 1, max: 2 }),
    extra: fc.integer({ min: 1, max: 4 }),
    maxWaiters: fc.integer({ min: 0, max: 4 }),
    rReserved: fc.integer({ min: 1, max: 2 }),
    rExtra: fc.integer({ min: 2, max: 6 }),
    rThreshold: fc.nat(),
    maxGrant: fc.integer({ min: 1, max: 4 }),
    quantumBytes: fc.integer({ min: 1, max: 4096 }),
  })
  .map((c) => ({
    windows: c.windows,
    budget: c.budget,
    credits: {
      initialCredits: c.reserved + c.extra,
      reservedCredits: c.reserved,
      maxWaiters: c.maxWaiters,
    },
    receive: {
      initialCredits: c.rReserved + c.rExtra,
      reservedCredits: c.rReserved,
      returnThreshold: 2 + (c.rThreshold % (c.rExtra - 1)),
      // at least the threshold, which the constructor requires
      maxGrant: 2 + (c.rThreshold % (c.rExtra - 1)) + c.maxGrant - 1,
    },
    quantumBytes: c.quantumBytes,
  }));

/** One property: a random configuration and a random command sequence. */
export function flowctlProperty(
  maxCommands: number,
): fc.IAsyncPropertyWithHooks<[FlowConfig, Iterable<Cmd>]> {
  return fc.asyncProperty(
    configArb,
    fc.commands(commands(), { maxCommands, size: 'max' }),
    async (cfg, cmds) => {
      const clock = new ManualClock();
      const budget = new SharedBudget({ ...cfg.budget, quantumBytes: cfg.quantumBytes });
      const real: Real = {
        clock,
        budget,
        windows: cfg.windows.map(
          (w) =>
            new SendWindow({
              maxBytes: w.maxBytes,
              maxMessages: w.maxMessages,
              maxQueued: w.maxQueued,
              quantumBytes: cfg.quantumBytes,
              defaultTimeoutMs: DEFAULT_TIMEOUT,
              clock,
              ...(w.budget ? { budget } : {}),
            }),
        ),
        credits: new SendCredits({ ...cfg.credits, clock, defaultTimeoutMs: DEFAULT_TIMEOUT }),
        receive: new ReceiveCredits({
          initialCredits: cfg.receive.initialCredits,
          reservedCredits: cfg.receive.reservedCredits,
          returnThreshold: cfg.receive.returnThreshold,
          maxGrantPerMessage: cfg.receive.maxGrant,
          flushDelayMs: FLUSH_DELAY,
          clock,
          onUpdateNeeded: () => {
            real.updatesSignalled++;
          },
        }),
        controllers: [
          new AbortController(),
          new AbortController(),
          new AbortController(),
          new AbortController(),
        ],
        updatesSignalled: 0,
      };
      const model: Model = {
        cfg,
        windows: cfg.windows.map((w) => ({ state: 'open', bytes: 0, msgs: 0, sizes: [], ...w })),
        waits: [],
        credits: { state: 'open', avail: cfg.credits.initialCredits },
        receive: {
          state: 'open',
          used: 0,
          owed: 0,
          owedData: 0,
          echoArmed: false,
          flushAt: undefined,
          flushDue: false,
          updates: 0,
          received: 0,
          returned: 0,
        },
        aborted: new Set(),
        gen: [0, 0, 0, 0],
        trail: [],
      };
      try {
        await fc.asyncModelRun(() => ({ model, real }), wrap(cmds));
        // Every wait settles by its deadline: run the clock past the last one.
        const last = Math.max(
          0,
          ...model.waits.filter((w) => w.state === 'pending').map((w) => w.deadline),
        );
        if (Number.isFinite(last) && last < 2 ** 52) {
          clock.advanceTo(last);
          await flush();
          absorb(model, real);
          agree(model, real);
          const stuck = model.waits.filter((w) => w.state === 'pending');
          if (stuck.length > 0) fail('end', `${stuck.length} waits pending past their deadlines`);
        }
      } catch (err) {
        (err as Error).message +=
          `\n  config ${JSON.stringify(cfg)}\n  trail:\n    ${model.trail.slice(-30).join('\n    ')}`;
        throw err;
      } finally {
        for (const w of real.windows) w.destroy();
        real.credits.destroy();
      }
    },
  );
}

/** Absorbs settlements and checks agreement after every command. */
function wrap(cmds: Iterable<Cmd>): Iterable<Cmd> {
  const out: Cmd[] = [];
  for (const c of cmds) {
    out.push({
      check: (m) => c.check(m),
      run: async (m, r) => {
        await c.run(m, r);
        absorb(m, r);
        agree(m, r);
      },
      toString: () => c.toString(),
    });
  }
  return out;
}

export function fuzzRuns(dflt: number): number {
  const v = Number(process.env.FUZZ_RUNS);
  return Number.isSafeInteger(v) && v > 0 ? v : dflt;
}
