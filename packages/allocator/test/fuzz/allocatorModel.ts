// biome-ignore-all lint/correctness/noVoidTypeReturn: `return expectErr(...)` ends a command once its outcome is checked
// Over 500 lines on purpose: one model, and the commands that drive it, read together.
// Model-based fuzzing of the allocator's public surface (issue 17): random sequences of
// alloc / release / touch / slice / reserve / trim / stats / close / destroy / cache calls /
// registrar close, with hostile arguments. After every call: the result is what the model
// predicts, or an AllocError with a documented code; and model and allocator agree on state.
// Shared by the in-process run (FakeRegistrar) and the child-process run (soft verbs PD).
import fc from 'fast-check';
import {
  ACCESS_POLICIES,
  type AccessPolicy,
  AllocError,
  type AllocErrorCode,
  Block,
  type Region,
  RegisteredAllocator,
  type RegisteredAllocatorOptions,
  type RegisteredBuffer,
  type Registrar,
} from '../../src/index.js';
import {
  blockCapacity,
  PAGE_BYTES,
  SIZE_CLASSES,
  SMALL_MAX_BYTES,
  sizeClassIndex,
  slabPages,
} from '../../src/internal/SizeClasses.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** How often each outcome was reached (the suite asserts the interesting ones were). */
export const coverage = new Map<string, number>();
function reached(what: string): void {
  coverage.set(what, (coverage.get(what) ?? 0) + 1);
}

/** Every code the README documents. */
export const DOCUMENTED_CODES: readonly AllocErrorCode[] = [
  'ERR_ALLOC_INVALID_ARG',
  'ERR_ALLOC_LIMIT',
  'ERR_ALLOC_DOUBLE_RELEASE',
  'ERR_ALLOC_USE_AFTER_RELEASE',
  'ERR_ALLOC_FOREIGN_BLOCK',
  'ERR_ALLOC_CLOSED',
  'ERR_ALLOC_REGISTRATION',
];

/**
 * A registrar wrapper that keeps the books the allocator is checked against (live regions
 * and bytes), injects failures on request, reports misuse (deregister of an unknown region,
 * any call once closed) and can be closed (or follows its inner registrar's `closed`).
 */
export class Harness implements Registrar {
  readonly live = new Map<Region, number>();
  readonly misuse: string[] = [];
  #inner: Registrar;
  #closed = false;
  #fail = 0;
  #failed = 0;

  constructor(inner: Registrar) {
    this.#inner = inner;
  }

  get closed(): boolean {
    return this.#closed || this.#inner.closed === true;
  }

  close(): void {
    this.#closed = true;
  }

  get liveBytes(): number {
    let n = 0;
    for (const v of this.live.values()) n += v;
    return n;
  }

  /** The next allocate/register fails (resource shortage: retryable). */
  failNext(): void {
    this.#fail = 1;
  }

  /** Clears an unconsumed failure; returns how many injected failures were thrown since. */
  takeFailures(): number {
    this.#fail = 0;
    const n = this.#failed;
    this.#failed = 0;
    return n;
  }

  allocate(length: number, access: number): Region {
    this.#enter('allocate');
    const r = (this.#inner.allocate as NonNullable<Registrar['allocate']>)(length, access);
    this.live.set(r, length);
    return r;
  }

  register(bytes: Uint8Array, access: number): Region {
    this.#enter('register');
    const r = this.#inner.register(bytes, access);
    this.live.set(r, bytes.byteLength);
    return r;
  }

  deregister(region: Region): void {
    if (this.closed) this.misuse.push('deregister after the registrar closed');
    if (!this.live.delete(region)) this.misuse.push('deregister of an unknown region');
    this.#inner.deregister(region);
  }

  #enter(op: string): void {
    if (this.closed) this.misuse.push(`${op} after the registrar closed`);
    if (this.#fail > 0) {
      this.#fail--;
      this.#failed++;
      throw Object.assign(new Error(`injected ${op} failure`), { code: 'ENOMEM' });
    }
  }
}

/** What a run is made of: a registrar factory and how its owner goes away. */
export interface FuzzEnv {
  /** A fresh inner registrar (FakeRegistrar, or verbsRegistrar(pd) over a soft PD). */
  registrar(): Registrar;
  /** Closes what the registrar stands for (flag, PD or device); called at most once. */
  closeRegistrar(harness: Harness): void;
  /** Called after each run (close devices). */
  cleanup(): void;
}

type HandleState = 'live' | 'released' | 'revoked';

interface BlockModel {
  readonly block: Block;
  readonly n: number;
  readonly access: AccessPolicy;
  readonly tag: number;
  state: HandleState;
}

interface BufferModel {
  readonly buf: RegisteredBuffer;
  readonly length: number;
  state: 'live' | 'released' | 'gone';
}

export interface Model {
  state: 'open' | 'closing' | 'closed';
  registrarClosed: boolean;
  readonly blocks: BlockModel[];
  readonly buffers: BufferModel[];
  readonly maxArenaBytes: number;
  readonly maxRegisteredBytes: number;
  /** What ran, for the failure report. */
  readonly trail: string[];
}

export interface Real {
  readonly a: RegisteredAllocator;
  readonly harness: Harness;
  readonly env: FuzzEnv;
  /** Blocks of another allocator: foreign here. */
  readonly foreign: Block[];
  readonly appBuffers: readonly ArrayBuffer[];
}

// ---- arguments, hostile ones included ---------------------------------------------------

const HOSTILE: readonly unknown[] = [
  undefined,
  null,
  '64',
  '',
  0,
  -1,
  1.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  2 ** 53,
  10n,
  {},
  [],
  Object.create({ length: 8 }),
  () => 1,
  Symbol('x'),
];

const hostile = fc.constantFrom(...HOSTILE);

/** Sizes: every path (small, large, dedicated), past every limit, and not sizes at all. */
export const sizeArb = (maxDedicated: number): fc.Arbitrary<unknown> =>
  fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min: 1, max: SMALL_MAX_BYTES }) },
    { weight: 3, arbitrary: fc.integer({ min: SMALL_MAX_BYTES + 1, max: 1536 * KiB }) },
    { weight: 1, arbitrary: fc.integer({ min: 1536 * KiB, max: maxDedicated }) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 41, 2 ** 53 - 1),
    },
    { weight: 2, arbitrary: hostile },
  );

const accessArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom<unknown>(...ACCESS_POLICIES) },
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>('remote', 'LOCAL', 1, null, {}, 'toString') },
);

/** A handle: one of ours (by index), a foreign block, or something that is not a block. */
type Target =
  | { kind: 'ours'; i: number }
  | { kind: 'foreign'; i: number }
  | { kind: 'junk'; v: unknown };
const targetArb: fc.Arbitrary<Target> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('ours' as const), i: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('foreign' as const), i: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('junk' as const),
      v: fc.oneof(hostile, fc.constant(Object.create(Block.prototype))),
    }),
  },
);

const offsetArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 5, arbitrary: fc.integer({ min: 0, max: 64 * KiB }) },
  { weight: 1, arbitrary: hostile },
);

// ---- checks ---------------------------------------------------------------------------

function describeCall(name: string, args: readonly unknown[]): string {
  return `${name}(${args.map((x) => (typeof x === 'bigint' ? `${x}n` : typeof x === 'symbol' ? 'Symbol' : typeof x === 'function' ? 'fn' : (JSON.stringify(x) ?? 'undefined'))).join(', ')})`;
}

/** Runs `fn`; returns its value, or the AllocError it threw (anything else fails the run). */
function attempt<T>(
  what: string,
  fn: () => T,
): { ok: true; value: T } | { ok: false; err: AllocError } {
  try {
    return { ok: true, value: fn() };
  } catch (err) {
    if (!(err instanceof AllocError)) {
      throw new Error(`${what} threw a non-AllocError: ${String(err)}`, { cause: err });
    }
    if (!DOCUMENTED_CODES.includes(err.code))
      throw new Error(`${what}: undocumented code ${err.code}`);
    reached(err.code);
    return { ok: false, err };
  }
}

function fail(what: string, detail: string): never {
  throw new Error(`${what}: ${detail}`);
}

function expectErr(
  what: string,
  r: { ok: true; value: unknown } | { ok: false; err: AllocError },
  code: AllocErrorCode,
  retryable = false,
): void {
  if (r.ok) fail(what, `expected ${code}, returned`);
  if (r.err.code !== code) fail(what, `expected ${code}, got ${r.err.code}: ${r.err.message}`);
  if (r.err.retryable !== retryable) fail(what, `${code} with retryable ${r.err.retryable}`);
}

function expectOk<T>(what: string, r: { ok: true; value: T } | { ok: false; err: AllocError }): T {
  if (!r.ok) fail(what, `expected success, got ${r.err.code}: ${r.err.message}`);
  return r.value;
}

const isSize = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 1;
const isPolicy = (p: unknown): p is AccessPolicy | undefined =>
  p === undefined || (typeof p === 'string' && (ACCESS_POLICIES as readonly string[]).includes(p));

/** Bytes that must be registered for one more block of `n` (slab, pages or dedicated). */
function registrationNeeded(n: number, maxArena: number): number {
  if (n <= SMALL_MAX_BYTES)
    return slabPages(SIZE_CLASSES[sizeClassIndex(n)] as number) * PAGE_BYTES;
  if (n <= maxArena) return Math.ceil(n / PAGE_BYTES) * PAGE_BYTES;
  return n;
}

/** Bytes checked per block for its tag: all of a small one, both ends of a large one. */
function tagged(b: BlockModel): Uint8Array[] {
  const bytes = b.block.bytes;
  if (bytes.length <= 16 * KiB) return [bytes];
  return [bytes.subarray(0, 4 * KiB), bytes.subarray(bytes.length - 4 * KiB)];
}

/** The invariant after every command: model and allocator agree. */
export function agree(m: Model, r: Real): void {
  const s = r.a.stats();
  const live = m.blocks.filter((b) => b.state === 'live');
  if (s.state !== m.state) fail('stats', `state ${s.state}, model ${m.state}`);
  if (r.a.state !== m.state) fail('state', `${r.a.state}, model ${m.state}`);
  if (s.liveBlocks !== live.length)
    fail('stats', `liveBlocks ${s.liveBlocks}, model ${live.length}`);
  const inUse = live.reduce((n, b) => n + b.n, 0);
  if (s.inUseBytes !== inUse) fail('stats', `inUseBytes ${s.inUseBytes}, model ${inUse}`);
  const allocated = live.reduce((n, b) => n + b.block.capacity, 0);
  if (s.allocatedBytes !== allocated)
    fail('stats', `allocatedBytes ${s.allocatedBytes}, model ${allocated}`);
  if (r.a.liveBlocks !== live.length || r.a.inUseBytes !== inUse)
    fail('getters', 'disagree with stats');
  if (s.registeredBytes > m.maxRegisteredBytes) fail('stats', 'registeredBytes over the limit');
  if (s.registeredBytes !== s.arenaBytes + s.dedicatedBytes)
    fail('stats', 'registered != arenas + dedicated');
  if (m.registrarClosed) {
    if (s.registeredBytes !== 0 || s.arenas.length !== 0)
      fail('stats', 'regions kept after the registrar closed');
  } else {
    const books = r.harness.liveBytes;
    if (s.registeredBytes + s.cache.registeredBytes !== books) {
      fail(
        'stats',
        `registered ${s.registeredBytes} + cache ${s.cache.registeredBytes}, registrar holds ${books}`,
      );
    }
  }
  if (r.harness.misuse.length > 0) fail('registrar', r.harness.misuse.join('; '));
  const pinned = m.buffers.filter((b) => b.state === 'live').length;
  if (s.cache.pinnedEntries > pinned)
    fail('cache', `${s.cache.pinnedEntries} pinned entries, ${pinned} buffers held`);
  // Live blocks: distinct memory, intact contents, inside a live region with its keys.
  const sorted = [...live].sort((x, y) => x.block.addr - y.block.addr);
  for (let i = 1; i < sorted.length; i++) {
    const p = sorted[i - 1] as BlockModel;
    if (p.block.addr + p.block.capacity > (sorted[i] as BlockModel).block.addr)
      fail('blocks', 'overlap');
  }
  for (const b of live) {
    for (const part of tagged(b))
      if (!part.every((v) => v === b.tag)) fail('blocks', 'contents changed under a live block');
  }
}

// ---- commands -----------------------------------------------------------------------------

type Cmd = fc.Command<Model, Real>;

function pick<T>(xs: readonly T[], i: number): T | undefined {
  return xs.length === 0 ? undefined : xs[i % xs.length];
}

/** Marks every live block revoked and every pinned buffer gone (destroy, registrar close). */
function revokeAll(m: Model): void {
  for (const b of m.blocks) if (b.state === 'live') b.state = 'revoked';
  for (const b of m.buffers) if (b.state === 'live') b.state = 'gone';
  m.state = 'closed';
}

class AllocCmd implements Cmd {
  constructor(
    readonly n: unknown,
    readonly access: unknown,
    readonly failRegistrar: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const what = describeCall('alloc', [this.n, this.access]);
    m.trail.push(what + (this.failRegistrar ? ' [registrar fails]' : ''));
    if (this.failRegistrar) r.harness.failNext();
    const res = attempt(what, () =>
      this.access === undefined
        ? r.a.alloc(this.n as number)
        : r.a.alloc(this.n as number, this.access as AccessPolicy),
    );
    const injected = r.harness.takeFailures();
    if (m.state !== 'open' || m.registrarClosed) return expectErr(what, res, 'ERR_ALLOC_CLOSED');
    if (!isSize(this.n) || !isPolicy(this.access))
      return expectErr(what, res, 'ERR_ALLOC_INVALID_ARG');
    const n = this.n;
    if (!res.ok) {
      if (res.err.code === 'ERR_ALLOC_REGISTRATION') {
        // Ours (injected: a shortage, retryable), or refused for its size (never retryable).
        if (injected === 1) return expectErr(what, res, 'ERR_ALLOC_REGISTRATION', true);
        if (n > m.maxArenaBytes && n > 2 ** 32)
          return expectErr(what, res, 'ERR_ALLOC_REGISTRATION');
        fail(what, `unexpected ERR_ALLOC_REGISTRATION: ${res.err.message}`);
      }
      expectErr(what, res, 'ERR_ALLOC_LIMIT', res.err.retryable);
      const need = registrationNeeded(n, m.maxArenaBytes);
      if (r.a.stats().registeredBytes + need <= m.maxRegisteredBytes)
        fail(what, 'ERR_ALLOC_LIMIT although it fits');
      if (res.err.retryable !== need <= m.maxRegisteredBytes)
        fail(what, `limit retryable ${res.err.retryable} for ${need}`);
      return;
    }
    if (injected > 0) fail(what, 'succeeded although its registration failed');
    const block = res.value;
    const access = (this.access ?? 'local') as AccessPolicy;
    const capacity = n <= m.maxArenaBytes ? blockCapacity(n) : n;
    if (
      block.length !== n ||
      block.capacity !== capacity ||
      block.access !== access ||
      block.state !== 'live'
    ) {
      fail(
        what,
        `block ${block.length}/${block.capacity}/${block.access}, expected ${n}/${capacity}/${access}`,
      );
    }
    const b: BlockModel = { block, n, access, tag: (m.blocks.length % 251) + 1, state: 'live' };
    for (const part of tagged(b)) part.fill(b.tag);
    m.blocks.push(b);
    reached(
      n <= SMALL_MAX_BYTES
        ? 'alloc small'
        : n <= m.maxArenaBytes
          ? 'alloc large'
          : 'alloc dedicated',
    );
  }
  toString(): string {
    return describeCall('alloc', [this.n, this.access]);
  }
}

class ReleaseCmd implements Cmd {
  constructor(
    readonly target: Target,
    readonly via: 'block' | 'allocator',
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const what = `release ${JSON.stringify(this.target, (_k, v) => (typeof v === 'bigint' || typeof v === 'symbol' || typeof v === 'function' ? String(v) : v))} via ${this.via}`;
    m.trail.push(what);
    const t = this.target;
    if (t.kind !== 'ours') {
      const x = t.kind === 'foreign' ? pick(r.foreign, t.i) : t.v;
      if (this.via === 'allocator') {
        return expectErr(
          what,
          attempt(what, () => r.a.release(x as Block)),
          'ERR_ALLOC_FOREIGN_BLOCK',
        );
      }
      return; // block.release() of a foreign block is that allocator's business
    }
    const b = pick(m.blocks, t.i);
    if (b === undefined) return;
    if (b.state === 'live') {
      for (const part of tagged(b))
        if (!part.every((v) => v === b.tag)) fail(what, 'contents changed before release');
    }
    const res = attempt(what, () =>
      this.via === 'allocator' ? r.a.release(b.block) : b.block.release(),
    );
    if (b.state === 'released') return expectErr(what, res, 'ERR_ALLOC_DOUBLE_RELEASE');
    expectOk(what, res);
    if (b.state === 'revoked') return reached('release revoked (no-op)');
    b.state = 'released';
    reached('release');
    if (m.state === 'closing' && m.blocks.every((x) => x.state !== 'live')) {
      m.state = 'closed';
      reached('last release closes');
    }
  }
  toString(): string {
    return `release(${JSON.stringify(this.target, (_k, v) => (typeof v === 'bigint' || typeof v === 'symbol' || typeof v === 'function' ? String(v) : v))}, ${this.via})`;
  }
}

type Touch = 'bytes' | 'addr' | 'lkey' | 'rkey' | 'sge' | 'slice' | 'slice.sge';

class TouchCmd implements Cmd {
  constructor(
    readonly i: number,
    readonly how: Touch,
    readonly offset: unknown,
    readonly length: unknown,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.blocks.length > 0;
  }
  run(m: Model, _r: Real): void {
    const b = pick(m.blocks, this.i) as BlockModel;
    const what = describeCall(`block#${m.blocks.indexOf(b)}.${this.how}`, [
      this.offset,
      this.length,
    ]);
    m.trail.push(what);
    const blk = b.block;
    const res = attempt(what, (): unknown => {
      switch (this.how) {
        case 'bytes':
          return blk.bytes;
        case 'addr':
          return blk.addr;
        case 'lkey':
          return blk.lkey;
        case 'rkey':
          return blk.rkey;
        case 'sge':
          return blk.sge(this.offset as number, this.length as number);
        case 'slice':
          return blk.slice(this.offset as number, this.length as number).bytes;
        case 'slice.sge':
          return blk.slice(0).sge(this.offset as number, this.length as number);
      }
    });
    if (b.state === 'live' && m.registrarClosed) b.state = 'revoked';
    if (b.state === 'released') return expectErr(what, res, 'ERR_ALLOC_USE_AFTER_RELEASE');
    if (b.state === 'revoked') return expectErr(what, res, 'ERR_ALLOC_CLOSED');
    const ranged = this.how === 'sge' || this.how === 'slice' || this.how === 'slice.sge';
    if (ranged) {
      // sge() defaults its offset to 0; slice() has no default offset.
      const off = this.offset === undefined && this.how !== 'slice' ? 0 : this.offset;
      const len = this.length === undefined && typeof off === 'number' ? b.n - off : this.length;
      const valid =
        Number.isInteger(off) &&
        Number.isInteger(len) &&
        (off as number) >= 0 &&
        (len as number) >= 0 &&
        (off as number) + (len as number) <= b.n;
      if (!valid) return expectErr(what, res, 'ERR_ALLOC_INVALID_ARG');
      const v = expectOk(what, res) as { addr?: number; length: number; lkey?: number };
      if (v.length !== len) fail(what, `length ${v.length}, expected ${String(len)}`);
      if (v.addr !== undefined && v.addr !== blk.addr + (off as number)) fail(what, 'wrong addr');
      if (v.lkey !== undefined && v.lkey !== blk.lkey) fail(what, 'wrong lkey');
      return;
    }
    const v = expectOk(what, res);
    if (this.how === 'bytes' && (v as Uint8Array).length !== b.n)
      fail(what, 'bytes of the wrong length');
  }
  toString(): string {
    return describeCall(`touch#${this.i}.${this.how}`, [this.offset, this.length]);
  }
}

class ReserveCmd implements Cmd {
  constructor(
    readonly bytes: unknown,
    readonly access: unknown,
    readonly failRegistrar: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const what = describeCall('reserve', [this.bytes, this.access]);
    m.trail.push(what + (this.failRegistrar ? ' [registrar fails]' : ''));
    if (this.failRegistrar) r.harness.failNext();
    const before = r.a.stats().registeredBytes;
    const res = attempt(what, () =>
      this.access === undefined
        ? r.a.reserve(this.bytes as number)
        : r.a.reserve(this.bytes as number, this.access as AccessPolicy),
    );
    const injected = r.harness.takeFailures();
    if (m.state !== 'open' || m.registrarClosed) return expectErr(what, res, 'ERR_ALLOC_CLOSED');
    const okBytes = Number.isSafeInteger(this.bytes) && (this.bytes as number) >= 0;
    if (!okBytes || !isPolicy(this.access)) return expectErr(what, res, 'ERR_ALLOC_INVALID_ARG');
    if (res.ok) {
      if (injected > 0) fail(what, 'succeeded although a registration failed');
      return;
    }
    if (res.err.code === 'ERR_ALLOC_REGISTRATION') {
      if (injected !== 1) fail(what, `unexpected ERR_ALLOC_REGISTRATION: ${res.err.message}`);
      expectErr(what, res, 'ERR_ALLOC_REGISTRATION', true);
    } else {
      expectErr(what, res, 'ERR_ALLOC_LIMIT', res.err.retryable);
      if (res.err.retryable && (this.bytes as number) > m.maxRegisteredBytes)
        fail(what, 'retryable limit for a reserve that can never fit');
    }
    // All or nothing: a failed reserve registers nothing (it may have trimmed unused arenas).
    if (r.a.stats().registeredBytes > before) fail(what, 'a failed reserve kept registrations');
  }
  toString(): string {
    return describeCall('reserve', [this.bytes, this.access]);
  }
}

class TrimCmd implements Cmd {
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    m.trail.push('trim()');
    const freed = expectOk(
      'trim',
      attempt('trim', () => r.a.trim()),
    );
    if (!Number.isSafeInteger(freed) || freed < 0) fail('trim', `returned ${freed}`);
    if (m.state === 'closed' && freed !== 0) fail('trim', 'freed bytes after close');
  }
  toString(): string {
    return 'trim()';
  }
}

class StatsCmd implements Cmd {
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    m.trail.push('stats()/leakReport()');
    const report = r.a.leakReport();
    const live = m.blocks.filter((b) => b.state === 'live');
    if (report.liveBlocks !== live.length)
      fail('leakReport', `${report.liveBlocks} live, model ${live.length}`);
    const addrs = new Set(live.map((b) => b.block.addr));
    for (const x of report.blocks)
      if (!addrs.has(x.addr)) fail('leakReport', 'a block the model does not hold');
  }
  toString(): string {
    return 'stats()';
  }
}

class CloseCmd implements Cmd {
  constructor(readonly how: 'close' | 'destroy' | 'dispose' | 'registrar') {}
  check(m: Readonly<Model>): boolean {
    return this.how !== 'registrar' || !m.registrarClosed;
  }
  run(m: Model, r: Real): void {
    m.trail.push(`${this.how}()`);
    if (this.how === 'registrar') {
      r.env.closeRegistrar(r.harness);
      m.registrarClosed = true;
      if (m.blocks.some((b) => b.state === 'live')) reached('registrar closed under live blocks');
      revokeAll(m);
      return;
    }
    const res = attempt(this.how, () => {
      if (this.how === 'close') r.a.close();
      else if (this.how === 'dispose') r.a[Symbol.dispose]();
      else r.a.destroy();
    });
    expectOk(this.how, res);
    if (this.how === 'destroy') return revokeAll(m);
    if (m.state === 'open')
      m.state = m.blocks.some((b) => b.state === 'live') ? 'closing' : 'closed';
  }
  toString(): string {
    return `${this.how}()`;
  }
}

class AcquireCmd implements Cmd {
  constructor(
    readonly buffer: number | unknown,
    readonly view: boolean,
    readonly access: unknown,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const isIndex =
      typeof this.buffer === 'number' && Number.isInteger(this.buffer) && this.buffer >= 0;
    const ab = isIndex
      ? (r.appBuffers[(this.buffer as number) % r.appBuffers.length] as ArrayBuffer)
      : undefined;
    const target = ab === undefined ? this.buffer : this.view ? new Uint8Array(ab, 8, 32) : ab;
    const what = describeCall('cache.acquire', [
      ab === undefined ? this.buffer : `buffer#${String(this.buffer)}`,
      this.access,
    ]);
    m.trail.push(what);
    const res = attempt(what, () =>
      this.access === undefined
        ? r.a.cache.acquire(target as ArrayBuffer)
        : r.a.cache.acquire(target as ArrayBuffer, this.access as AccessPolicy),
    );
    if (m.state !== 'open' || m.registrarClosed) return expectErr(what, res, 'ERR_ALLOC_CLOSED');
    if (ab === undefined || !isPolicy(this.access))
      return expectErr(what, res, 'ERR_ALLOC_INVALID_ARG');
    if (!res.ok) {
      // Larger than the cache (64 KiB) can never fit; otherwise it fits once others unpin.
      return expectErr(what, res, 'ERR_ALLOC_LIMIT', ab.byteLength <= 64 * KiB);
    }
    const buf = res.value;
    const length = this.view ? 32 : ab.byteLength;
    if (buf.length !== length || buf.bytes.buffer !== ab)
      fail(what, 'not a view of the given buffer');
    m.buffers.push({ buf, length, state: 'live' });
    reached('acquire');
  }
  toString(): string {
    return describeCall('acquire', [this.buffer, this.view, this.access]);
  }
}

/** Cache upkeep: invalidate (of a buffer, a view, or not a buffer), invalidateAll, trim. */
class CacheUpkeepCmd implements Cmd {
  constructor(
    readonly how: 'invalidate' | 'invalidateAll' | 'trim',
    readonly target: unknown,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const isIndex =
      typeof this.target === 'number' && Number.isInteger(this.target) && this.target >= 0;
    const ab = isIndex ? r.appBuffers[(this.target as number) % r.appBuffers.length] : undefined;
    const what = describeCall(`cache.${this.how}`, [
      ab === undefined ? this.target : `buffer#${String(this.target)}`,
    ]);
    m.trail.push(what);
    const c = r.a.cache;
    const res = attempt(what, () =>
      this.how === 'trim'
        ? c.trim()
        : this.how === 'invalidateAll'
          ? c.invalidateAll()
          : c.invalidate((ab ?? this.target) as ArrayBuffer),
    );
    if (this.how === 'invalidate' && ab === undefined)
      return expectErr(what, res, 'ERR_ALLOC_INVALID_ARG');
    const n = expectOk(what, res);
    if (!Number.isSafeInteger(n) || n < 0) fail(what, `returned ${n}`);
    if (m.registrarClosed && n !== 0) fail(what, 'did something after the registrar closed');
    reached(`cache ${this.how}`);
  }
  toString(): string {
    return `cache.${this.how}(${describeCall('', [this.target])})`;
  }
}

class BufferCmd implements Cmd {
  constructor(
    readonly i: number,
    readonly how: 'release' | 'lkey' | 'sge',
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.buffers.length > 0;
  }
  run(m: Model, _r: Real): void {
    const b = pick(m.buffers, this.i) as BufferModel;
    const what = `buffer#${m.buffers.indexOf(b)}.${this.how}`;
    m.trail.push(what);
    if (b.state === 'live' && m.registrarClosed) b.state = 'gone';
    const res = attempt(what, () =>
      this.how === 'release' ? b.buf.release() : this.how === 'lkey' ? b.buf.lkey : b.buf.sge(),
    );
    if (this.how === 'release') {
      if (b.state === 'released') return expectErr(what, res, 'ERR_ALLOC_DOUBLE_RELEASE');
      expectOk(what, res);
      b.state = 'released';
      return;
    }
    if (b.state === 'released') return expectErr(what, res, 'ERR_ALLOC_USE_AFTER_RELEASE');
    if (b.state === 'gone') return expectErr(what, res, 'ERR_ALLOC_CLOSED');
    expectOk(what, res);
  }
  toString(): string {
    return `buffer#${this.i}.${this.how}`;
  }
}

/** Construction with random, often hostile, options: a working allocator or INVALID_ARG. */
class ConstructCmd implements Cmd {
  constructor(readonly options: Record<string, unknown> | unknown) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    m.trail.push('construct');
    const o = this.options;
    const inner = r.env.registrar();
    const res = attempt('construct', () =>
      isPlainRecord(o)
        ? new RegisteredAllocator({
            ...o,
            registrar: new Harness(inner),
          } as RegisteredAllocatorOptions)
        : new RegisteredAllocator(o as RegisteredAllocatorOptions),
    );
    if (!isPlainRecord(o)) return expectErr('construct', res, 'ERR_ALLOC_INVALID_ARG');
    if (inner.closed === true) return expectErr('construct', res, 'ERR_ALLOC_CLOSED');
    if (!validOptions(o)) return expectErr('construct', res, 'ERR_ALLOC_INVALID_ARG');
    const x = expectOk('construct', res);
    const got = attempt('construct.alloc', () => x.alloc(100));
    if (got.ok) got.value.release();
    else if (got.err.code !== 'ERR_ALLOC_LIMIT')
      fail('construct', `alloc on a new allocator: ${got.err.code}`);
    x.destroy();
  }
  toString(): string {
    return 'construct(...)';
  }
}

function isPlainRecord(o: unknown): o is Record<string, unknown> {
  return (
    typeof o === 'object' && o !== null && Object.prototype.toString.call(o) === '[object Object]'
  );
}

/** The constructor's rules, written out independently (null and undefined mean the default). */
function validOptions(o: Record<string, unknown>): boolean {
  const int = (v: unknown, min: number, max: number, dflt: number): number | undefined => {
    if (v === undefined || v === null) return dflt;
    return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max ? v : undefined;
  };
  const LIMIT = 2 ** 31;
  const arena = int(o.arenaBytes, 256 * KiB, LIMIT, 16 * MiB);
  if (arena === undefined) return false;
  const page = Math.ceil(arena / PAGE_BYTES) * PAGE_BYTES;
  if (int(o.maxArenaBytes, page, LIMIT, Math.max(64 * MiB, page)) === undefined) return false;
  if (int(o.maxRegisteredBytes, 1, Number.MAX_SAFE_INTEGER, 1) === undefined) return false;
  if (int(o.retainEmptyArenas, 0, 2 ** 20, 0) === undefined) return false;
  if (o.defaultAccess !== null && !isPolicy(o.defaultAccess)) return false;
  if (o.debug !== undefined && o.debug !== null && typeof o.debug !== 'boolean') return false;
  const c = o.cache;
  if (c === undefined) return true;
  if (!isPlainRecord(c)) return false;
  return int(c.maxBytes, 1, Number.MAX_SAFE_INTEGER, 1) !== undefined;
}

const optionValue = (good: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> =>
  fc.oneof({ weight: 3, arbitrary: good }, { weight: 1, arbitrary: hostile });

const constructArb: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record(
      {
        arenaBytes: optionValue(fc.integer({ min: 256 * KiB, max: 2 * MiB })),
        maxArenaBytes: optionValue(fc.integer({ min: 256 * KiB, max: 4 * MiB })),
        maxRegisteredBytes: optionValue(fc.integer({ min: 1, max: 8 * MiB })),
        retainEmptyArenas: optionValue(fc.integer({ min: 0, max: 3 })),
        defaultAccess: accessArb,
        debug: optionValue(fc.boolean()),
        cache: fc.oneof(
          fc.constant(undefined),
          hostile,
          fc.record({ maxBytes: optionValue(fc.integer({ min: 1, max: MiB })) }),
        ),
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: hostile },
);

export function commands(maxDedicated: number): fc.Arbitrary<Cmd>[] {
  return [
    fc
      .tuple(sizeArb(maxDedicated), accessArb, fc.boolean())
      .map(([n, a, f]) => new AllocCmd(n, a, f)),
    fc.tuple(sizeArb(maxDedicated), accessArb).map(([n, a]) => new AllocCmd(n, a, false)),
    fc
      .tuple(targetArb, fc.constantFrom('block' as const, 'allocator' as const))
      .map(([t, v]) => new ReleaseCmd(t, v)),
    fc
      .tuple(targetArb, fc.constantFrom('block' as const, 'allocator' as const))
      .map(([t, v]) => new ReleaseCmd(t, v)),
    fc
      .tuple(
        fc.nat(),
        fc.constantFrom<Touch>('bytes', 'addr', 'lkey', 'rkey', 'sge', 'slice', 'slice.sge'),
        offsetArb,
        fc.option(offsetArb, { nil: undefined }),
      )
      .map(([i, h, o, l]) => new TouchCmd(i, h, o, l)),
    fc
      .tuple(
        fc.oneof(
          fc.integer({ min: 0, max: 4 * MiB }),
          fc.constantFrom(2 ** 31, 2 ** 53 - 1),
          hostile,
        ),
        accessArb,
        fc.boolean(),
      )
      .map(([b, a, f]) => new ReserveCmd(b, a, f)),
    fc.constant(new TrimCmd()),
    fc.constant(new StatsCmd()),
    fc
      .constantFrom('close' as const, 'destroy' as const, 'dispose' as const, 'registrar' as const)
      .map((h) => new CloseCmd(h)),
    fc
      .tuple(fc.oneof(fc.nat({ max: 5 }), hostile), fc.boolean(), accessArb)
      .map(([b, v, a]) => new AcquireCmd(b, v, a)),
    fc
      .tuple(fc.nat(), fc.constantFrom('release' as const, 'lkey' as const, 'sge' as const))
      .map(([i, h]) => new BufferCmd(i, h)),
    fc
      .tuple(
        fc.constantFrom(
          'invalidate' as const,
          'invalidate' as const,
          'invalidateAll' as const,
          'trim' as const,
        ),
        fc.oneof(fc.nat({ max: 5 }), hostile),
      )
      .map(([h, t]) => new CacheUpkeepCmd(h, t)),
    constructArb.map((o) => new ConstructCmd(o)),
  ];
}

export interface FuzzConfig {
  readonly arenaBytes: number;
  readonly maxArenaBytes: number;
  readonly maxRegisteredBytes: number;
  readonly retainEmptyArenas: number;
  readonly debug: boolean;
}

export const configArb: fc.Arbitrary<FuzzConfig> = fc
  .record({
    arenaBytes: fc.constantFrom(256 * KiB, 512 * KiB, MiB),
    arenaFactor: fc.constantFrom(1, 2),
    maxRegisteredBytes: fc.integer({ min: 2 * MiB, max: 8 * MiB }),
    retainEmptyArenas: fc.integer({ min: 0, max: 2 }),
    debug: fc.boolean(),
  })
  .map((c) => ({
    arenaBytes: c.arenaBytes,
    maxArenaBytes: c.arenaBytes * c.arenaFactor,
    maxRegisteredBytes: c.maxRegisteredBytes,
    retainEmptyArenas: c.retainEmptyArenas,
    debug: c.debug,
  }));

/** One property: a random configuration and a random command sequence. */
export function allocatorProperty(
  makeEnv: () => FuzzEnv,
  maxCommands: number,
  maxDedicated: number,
): fc.IProperty<[FuzzConfig, Iterable<Cmd>]> {
  return fc.property(
    configArb,
    fc.commands(commands(maxDedicated), { maxCommands, size: 'max' }),
    (config, cmds) => {
      const env = makeEnv();
      const harness = new Harness(env.registrar());
      const a = new RegisteredAllocator({
        ...config,
        registrar: harness,
        cache: { maxBytes: 64 * KiB, maxEntries: 4 },
      });
      const other = new RegisteredAllocator({
        registrar: new Harness(env.registrar()),
        arenaBytes: 256 * KiB,
      });
      const foreign = [other.alloc(10), other.alloc(100 * KiB)];
      const model: Model = {
        state: 'open',
        registrarClosed: false,
        blocks: [],
        buffers: [],
        maxArenaBytes: config.maxArenaBytes,
        maxRegisteredBytes: config.maxRegisteredBytes,
        trail: [],
      };
      const real: Real = {
        a,
        harness,
        env,
        foreign,
        appBuffers: [
          new ArrayBuffer(64),
          new ArrayBuffer(4 * KiB),
          new ArrayBuffer(40 * KiB),
          new ArrayBuffer(100 * KiB),
        ],
      };
      try {
        fc.modelRun(() => ({ model, real }), wrap(cmds));
        // Wind down: every block released or revoked, then nothing is left registered.
        for (const b of model.blocks) if (b.state === 'live') b.block.release();
        for (const b of model.buffers) if (b.state === 'live') b.buf.release();
        a.close();
        if (a.state !== 'closed') fail('wind-down', `state ${a.state} after releasing everything`);
        if (!model.registrarClosed && harness.liveBytes !== 0)
          fail('wind-down', `${harness.liveBytes} bytes left registered`);
        if (harness.misuse.length > 0) fail('wind-down', harness.misuse.join('; '));
      } catch (err) {
        (err as Error).message +=
          `\n  config ${JSON.stringify(config)}\n  trail:\n    ${model.trail.slice(-25).join('\n    ')}`;
        throw err;
      } finally {
        other.destroy();
        env.cleanup();
      }
    },
  );
}

/** Runs the agreement check after every command. */
function wrap(cmds: Iterable<Cmd>): Iterable<Cmd> {
  const out: Cmd[] = [];
  for (const c of cmds) {
    out.push({
      check: (m) => c.check(m),
      run: (m, r) => {
        c.run(m, r);
        agree(m, r);
      },
      toString: () => c.toString(),
    });
  }
  return out;
}

/** FUZZ_RUNS from the environment, else `dflt`. */
export function fuzzRuns(dflt: number): number {
  const v = Number(process.env.FUZZ_RUNS);
  return Number.isSafeInteger(v) && v > 0 ? v : dflt;
}
