// Over 500 lines on purpose: one model, and the commands that drive it, read together.
// Model-based fuzzing of the public verbs API (soft provider): random sequences of
// open/create/alloc/post/poll/wait/connect/close calls with random, often hostile,
// arguments. After every call the real objects must agree with the model: the call
// returned what the model predicts or threw an RdmaError with the predicted code, and
// every object is open or closed exactly as the model says.
//
// Runs as its own process (`node --import tsx verbs-model.ts`), so an abort is reported
// with its seed instead of killing the test runner. Prints one JSON line.
import fc from 'fast-check';
import {
  Access,
  allocCompletions,
  CompletionQueue,
  type Device,
  type MemoryRegion,
  openDevice,
  type ProtectionDomain,
  type QpState,
  type QueuePair,
  RdmaError,
  type SendWr,
  type SharedReceiveQueue,
} from '../../src/index.js';

type Code = 'ok' | `ERR_RDMA_${string}`;

interface MDevice {
  real: Device;
  closed: boolean;
  pds: MPd[];
  cqs: MCq[];
}
interface MPd {
  real: ProtectionDomain;
  dev: MDevice;
  closed: boolean;
  mrs: MMr[];
  qps: MQp[];
  srqs: MSrq[];
}
interface MCq {
  real: CompletionQueue;
  dev: MDevice;
  closed: boolean;
  users: number;
}
interface MMr {
  real: MemoryRegion;
  closed: boolean;
}
interface MSrq {
  real: SharedReceiveQueue;
  pd: MPd;
  closed: boolean;
  users: number;
}
interface MQp {
  real: QueuePair;
  pd: MPd;
  closed: boolean;
  state: QpState;
  cq: MCq;
  srq: MSrq | undefined;
}

interface World {
  devices: MDevice[];
  /** every object ever made, for the agreement check */
  all: { real: { closed: boolean }; closed: boolean }[];
}

const MAX_OBJECTS = 24;

// ---- predictions of argument checks (mirroring the documented order: closed first,
// then the options object, then each value) ----

function intCode(v: unknown, min: number, max: number): Code {
  if (typeof v !== 'number' || !Number.isInteger(v)) return 'ERR_RDMA_INVALID_ARG';
  return v < min || v > max ? 'ERR_RDMA_OUT_OF_RANGE' : 'ok';
}

function numCode(v: unknown, min: number, max: number): Code {
  if (typeof v !== 'number' || Number.isNaN(v)) return 'ERR_RDMA_INVALID_ARG';
  return v >= min && v <= max ? 'ok' : 'ERR_RDMA_OUT_OF_RANGE';
}

function isPlain(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** undefined/null, or a plain object with only `keys`; returns its own set values. */
function optionsCode(v: unknown, keys: string[]): Code | Record<string, unknown> {
  if (v === undefined || v === null) return {};
  if (!isPlain(v)) return 'ERR_RDMA_INVALID_ARG';
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v)) {
    if (!keys.includes(k)) return 'ERR_RDMA_INVALID_ARG';
    if (v[k] !== undefined && v[k] !== null) out[k] = v[k];
  }
  return out;
}

/** An option's value, or its default when it is undefined or null. */
function dflt(v: unknown, d: unknown): unknown {
  return v === undefined || v === null ? d : v;
}

function first(...codes: Code[]): Code {
  return codes.find((c) => c !== 'ok') ?? 'ok';
}

// ---- hostile values ----

const hostile = fc.constantFrom<unknown>(
  undefined,
  null,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  -1,
  0,
  0.5,
  2 ** 31,
  2 ** 32,
  2 ** 53,
  2 ** 64,
  '64',
  'soft',
  {},
  [],
  10n,
  Symbol('x'),
  () => 1,
  Object.create({ capacity: 4 }),
);
const smallInt = fc.integer({ min: -2, max: 70 });
const intish = fc.oneof(smallInt, hostile);
const index = fc.nat(64);

function pick<T>(list: T[], i: number): T | undefined {
  return list.length === 0 ? undefined : list[i % list.length];
}

// ---- agreement ----

function check(cond: boolean, what: string): void {
  if (!cond) throw new Error(`model disagrees: ${what}`);
}

function expectOutcome(predicted: Code, run: () => unknown, what: string): unknown {
  let result: unknown;
  let got: Code = 'ok';
  try {
    result = run();
  } catch (err) {
    if (!(err instanceof RdmaError))
      throw new Error(`${what}: threw a non-RdmaError ${String(err)}`, { cause: err });
    got = err.code as Code;
  }
  if (got !== predicted) throw new Error(`${what}: predicted ${predicted}, got ${got}`);
  return result;
}

let callsChecked = 0;

function agree(w: World): void {
  callsChecked++;
  for (const o of w.all) check(o.real.closed === o.closed, 'closed flags');
  for (const d of w.devices) {
    for (const pd of d.pds) {
      for (const qp of pd.qps) {
        if (qp.closed) continue;
        const real = qp.real.state;
        // A connected QP may go to error by itself (its peer vanished, a remote access
        // error): the one transition the device makes without being asked.
        const byItself = real === 'error' && (qp.state === 'rtr' || qp.state === 'rts');
        check(real === qp.state || byItself, `QP state: model ${qp.state}, real ${real}`);
        qp.state = real;
      }
      for (const mr of pd.mrs) {
        if (mr.closed)
          expectOutcome('ERR_RDMA_MR_INVALID', () => mr.real.bytes, 'bytes of a closed MR');
        else check(mr.real.bytes.byteLength === mr.real.length, 'MR bytes');
      }
    }
  }
}

// ---- closing, as the model sees it ----

function closeQp(qp: MQp): void {
  if (qp.closed) return;
  qp.closed = true;
  qp.cq.users -= 1;
  if (qp.srq) qp.srq.users -= 1;
}

function closePd(pd: MPd): void {
  if (pd.closed) return;
  for (const qp of pd.qps) closeQp(qp);
  for (const s of pd.srqs) s.closed = true;
  for (const mr of pd.mrs) mr.closed = true;
  pd.closed = true;
}

function closeDevice(d: MDevice): void {
  if (d.closed) return;
  for (const pd of d.pds) closePd(pd);
  for (const cq of d.cqs) cq.closed = true;
  d.closed = true;
}

// ---- commands ----

type Cmd = fc.AsyncCommand<World, World>;

/** What openDevice() does with these options on a host without ibverbs devices. */
function openCode(options: unknown): Code {
  const o = optionsCode(options, ['provider', 'name', 'link']);
  if (typeof o === 'string') return o;
  const provider = dflt(o.provider, 'auto');
  if (provider !== 'auto' && provider !== 'soft' && provider !== 'ibverbs')
    return 'ERR_RDMA_INVALID_ARG';
  if (o.link !== undefined && o.link !== 'auto' && o.link !== 'tcp') return 'ERR_RDMA_INVALID_ARG';
  if (o.name !== undefined && typeof o.name !== 'string') return 'ERR_RDMA_INVALID_ARG';
  if (provider === 'ibverbs' && o.link === 'tcp') return 'ERR_RDMA_INVALID_ARG';
  if (provider === 'ibverbs' && o.name !== 'soft0') return 'ERR_RDMA_PROVIDER_UNAVAILABLE';
  if (o.name !== undefined && o.name !== 'soft0') return 'ERR_RDMA_NO_DEVICE';
  return 'ok';
}

class OpenDevice implements Cmd {
  constructor(readonly options: unknown) {}
  check(w: World) {
    return w.devices.length < 4;
  }
  async run(_m: World, w: World) {
    const real = expectOutcome(
      openCode(this.options),
      () => openDevice(this.options as never),
      `openDevice(${fmt(this.options)})`,
    );
    if (real) {
      const d: MDevice = { real: real as Device, closed: false, pds: [], cqs: [] };
      w.devices.push(d);
      w.all.push(d);
    }
    agree(w);
  }
  toString() {
    return `openDevice(${fmt(this.options)})`;
  }
}

class CloseDevice implements Cmd {
  constructor(readonly i: number) {}
  check(w: World) {
    return w.devices.length > 0;
  }
  async run(_m: World, w: World) {
    const d = pick(w.devices, this.i) as MDevice;
    expectOutcome('ok', () => d.real.close(), 'device.close');
    closeDevice(d);
    agree(w);
  }
  toString() {
    return `closeDevice(${this.i})`;
  }
}

class AllocPd implements Cmd {
  constructor(readonly i: number) {}
  check(w: World) {
    return w.devices.length > 0 && w.all.length < MAX_OBJECTS;
  }
  async run(_m: World, w: World) {
    const d = pick(w.devices, this.i) as MDevice;
    const real = expectOutcome(
      d.closed ? 'ERR_RDMA_CLOSED' : 'ok',
      () => d.real.allocPd(),
      'allocPd',
    );
    if (real) {
      const pd: MPd = {
        real: real as ProtectionDomain,
        dev: d,
        closed: false,
        mrs: [],
        qps: [],
        srqs: [],
      };
      d.pds.push(pd);
      w.all.push(pd);
    }
    agree(w);
  }
  toString() {
    return `allocPd(${this.i})`;
  }
}

class CreateCq implements Cmd {
  constructor(
    readonly i: number,
    readonly options: unknown,
  ) {}
  check(w: World) {
    return w.devices.length > 0 && w.all.length < MAX_OBJECTS;
  }
  async run(_m: World, w: World) {
    const d = pick(w.devices, this.i) as MDevice;
    let predicted: Code = 'ERR_RDMA_CLOSED';
    if (!d.closed) {
      const o = optionsCode(this.options, ['capacity']);
      predicted =
        typeof o === 'string' ? o : intCode(dflt(o.capacity, 256), 1, d.real.info.limits.maxCqe);
    }
    const real = expectOutcome(
      predicted,
      () => d.real.createCq(this.options as never),
      `createCq(${fmt(this.options)})`,
    );
    if (real) {
      const cq: MCq = { real: real as CompletionQueue, dev: d, closed: false, users: 0 };
      d.cqs.push(cq);
      w.all.push(cq);
    }
    agree(w);
  }
  toString() {
    return `createCq(${this.i}, ${fmt(this.options)})`;
  }
}

function pds(w: World): MPd[] {
  return w.devices.flatMap((d) => d.pds);
}
function cqs(w: World): MCq[] {
  return w.devices.flatMap((d) => d.cqs);
}
function qps(w: World): MQp[] {
  return pds(w).flatMap((p) => p.qps);
}

function accessCode(a: unknown): Code {
  const c = intCode(a, 0, 15);
  if (c !== 'ok') return c;
  return (a as number) & (Access.RemoteWrite | Access.RemoteAtomic) &&
    !((a as number) & Access.LocalWrite)
    ? 'ERR_RDMA_INVALID_ARG'
    : 'ok';
}

class AllocMr implements Cmd {
  constructor(
    readonly i: number,
    readonly length: unknown,
    readonly access: unknown,
  ) {}
  check(w: World) {
    return pds(w).length > 0 && w.all.length < MAX_OBJECTS;
  }
  async run(_m: World, w: World) {
    const pd = pick(pds(w), this.i) as MPd;
    const max = pd.dev.real.info.limits.maxMrSize;
    const maxBytes = max > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(max);
    // Real lengths stay small (the fuzz must not exhaust memory); hostile ones are refused.
    const predicted = pd.closed
      ? 'ERR_RDMA_CLOSED'
      : first(intCode(this.length, 1, maxBytes), accessCode(this.access));
    if (predicted === 'ok' && (this.length as number) > 1 << 20) return;
    const real = expectOutcome(
      predicted,
      () => pd.real.allocMr(this.length as never, this.access as never),
      `allocMr(${fmt(this.length)}, ${fmt(this.access)})`,
    );
    if (real) {
      const mr: MMr = { real: real as MemoryRegion, closed: false };
      pd.mrs.push(mr);
      w.all.push(mr);
    }
    agree(w);
  }
  toString() {
    return `allocMr(${this.i}, ${fmt(this.length)}, ${fmt(this.access)})`;
  }
}

class CreateSrq implements Cmd {
  constructor(
    readonly i: number,
    readonly maxWr: unknown,
  ) {}
  check(w: World) {
    return pds(w).length > 0 && w.all.length < MAX_OBJECTS;
  }
  async run(_m: World, w: World) {
    const pd = pick(pds(w), this.i) as MPd;
    const options = this.maxWr === undefined ? undefined : { maxWr: this.maxWr };
    const predicted = pd.closed
      ? 'ERR_RDMA_CLOSED'
      : intCode(dflt(this.maxWr, 256), 1, pd.dev.real.info.limits.maxSrqWr);
    const real = expectOutcome(
      predicted,
      () => pd.real.createSrq(options as never),
      `createSrq(${fmt(this.maxWr)})`,
    );
    if (real) {
      const srq: MSrq = { real: real as SharedReceiveQueue, pd, closed: false, users: 0 };
      pd.srqs.push(srq);
      w.all.push(srq);
    }
    agree(w);
  }
  toString() {
    return `createSrq(${this.i}, ${fmt(this.maxWr)})`;
  }
}

class CreateQp implements Cmd {
  constructor(
    readonly i: number,
    readonly cqIndex: number,
    readonly srqIndex: number | undefined,
    readonly maxSendWr: unknown,
    readonly badCq: unknown,
  ) {}
  check(w: World) {
    return pds(w).length > 0 && cqs(w).length > 0 && w.all.length < MAX_OBJECTS;
  }
  async run(_m: World, w: World) {
    const pd = pick(pds(w), this.i) as MPd;
    const cq = pick(cqs(w), this.cqIndex) as MCq;
    const allSrqs = pds(w).flatMap((p) => p.srqs);
    const srq = this.srqIndex === undefined ? undefined : pick(allSrqs, this.srqIndex);
    const sendCq = this.badCq === undefined ? cq.real : this.badCq;
    const options: Record<string, unknown> = { sendCq, recvCq: cq.real };
    if (srq) options.srq = srq.real;
    if (this.maxSendWr !== undefined) options.maxSendWr = this.maxSendWr;
    let predicted: Code = 'ok';
    if (pd.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (!(sendCq instanceof CompletionQueue)) predicted = 'ERR_RDMA_INVALID_ARG';
    else if (cq.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (cq.dev !== pd.dev) predicted = 'ERR_RDMA_INVALID_ARG';
    else if (srq?.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (srq && srq.pd !== pd) predicted = 'ERR_RDMA_INVALID_ARG';
    else predicted = intCode(dflt(this.maxSendWr, 64), 1, pd.dev.real.info.limits.maxQpWr);
    if (predicted === 'ok' && (dflt(this.maxSendWr, 0) as number) > 256) return;
    const real = expectOutcome(
      predicted,
      () => pd.real.createQp(options as never),
      `createQp(${fmt(options)})`,
    );
    if (real) {
      const qp: MQp = { real: real as QueuePair, pd, closed: false, state: 'reset', cq, srq };
      cq.users += 1;
      if (srq) srq.users += 1;
      pd.qps.push(qp);
      w.all.push(qp);
    }
    agree(w);
  }
  toString() {
    return `createQp(${this.i}, cq ${this.cqIndex}, srq ${this.srqIndex}, ${fmt(this.maxSendWr)}, ${fmt(this.badCq)})`;
  }
}

/** A hostile change to an endpoint: one field replaced by a random value. */
const endpointTamper = fc.option(
  fc.record({
    field: fc.constantFrom(
      'provider',
      'slot',
      'gen',
      'pid',
      'segFd',
      'bellFd',
      'qpn',
      'nonce',
      'bootId',
      'tcp',
    ),
    value: fc.constantFrom<unknown>(
      undefined,
      null,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      -1,
      0.5,
      2 ** 53,
      2 ** 64,
      '64',
      {},
      [],
      10n,
      () => 1,
    ),
  }),
  { nil: undefined },
);

class Connect implements Cmd {
  constructor(
    readonly a: number,
    readonly b: number,
    readonly tamper: { field: string; value: unknown } | undefined,
  ) {}
  check(w: World) {
    return qps(w).length > 0;
  }
  async run(_m: World, w: World) {
    const a = pick(qps(w), this.a) as MQp;
    const b = pick(qps(w), this.b) as MQp;
    if (b.closed) {
      expectOutcome('ERR_RDMA_CLOSED', () => b.real.endpoint(), 'endpoint of a closed QP');
      return;
    }
    const own = b.real.endpoint() as unknown as Record<string, unknown>;
    const ep: Record<string, unknown> = { ...own };
    let tampered: 'no' | 'invalid' | 'elsewhere' = 'no';
    if (this.tamper && ep[this.tamper.field] !== this.tamper.value) {
      ep[this.tamper.field] = this.tamper.value;
      if (this.tamper.field === 'tcp')
        tampered = this.tamper.value === undefined ? 'no' : 'invalid';
      // A non-empty string bootId names another host: unreachable, the devices do not listen.
      else if (this.tamper.field === 'bootId' && typeof this.tamper.value === 'string')
        tampered = 'elsewhere';
      else tampered = 'invalid';
    }
    let predicted: Code;
    if (a.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (tampered === 'invalid') predicted = 'ERR_RDMA_INVALID_ARG';
    else if (tampered === 'elsewhere') predicted = 'ERR_RDMA_UNREACHABLE';
    else predicted = a.state === 'reset' || a.state === 'init' ? 'ok' : 'ERR_RDMA_INVALID_STATE';
    const before = a.state;
    expectOutcome(
      predicted,
      () => a.real.connect(ep as never),
      `connect(${this.tamper ? fmt(this.tamper) : 'as is'}) from ${before}`,
    );
    if (predicted === 'ok') a.state = 'rts';
    agree(w);
  }
  toString() {
    return `connect(${this.a}, ${this.b}, ${this.tamper ? fmt(this.tamper) : '-'})`;
  }
}

class PostRecv implements Cmd {
  constructor(
    readonly i: number,
    readonly wrId: unknown,
    readonly length: unknown,
  ) {}
  check(w: World) {
    return qps(w).length > 0;
  }
  async run(_m: World, w: World) {
    const qp = pick(qps(w), this.i) as MQp;
    const mr = qp.pd.mrs.find((m) => !m.closed);
    const sge = mr
      ? { addr: mr.real.addr, length: this.length, lkey: mr.real.lkey }
      : { addr: 4096, length: this.length, lkey: 1 };
    let predicted: Code;
    if (qp.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (qp.srq) predicted = 'ERR_RDMA_INVALID_STATE';
    else
      predicted = first(
        intCode(this.wrId, 0, Number.MAX_SAFE_INTEGER),
        intCode(this.length, 0, 2 ** 32 - 1),
      );
    let allowed = [predicted];
    if (predicted === 'ok') {
      if (qp.state === 'reset') allowed = ['ERR_RDMA_INVALID_STATE'];
      else if (qp.state === 'error')
        allowed = ['ok', 'ERR_RDMA_INVALID_STATE', 'ERR_RDMA_QUEUE_FULL'];
      else allowed = ['ok', 'ERR_RDMA_QUEUE_FULL'];
    }
    let got: Code = 'ok';
    try {
      qp.real.postRecv({ wrId: this.wrId as number, sgList: [sge as never] });
    } catch (err) {
      if (!(err instanceof RdmaError)) throw new Error(`postRecv: non-RdmaError ${String(err)}`);
      got = err.code as Code;
    }
    check(allowed.includes(got), `postRecv predicted ${allowed.join('|')}, got ${got}`);
    agree(w);
  }
  toString() {
    return `postRecv(${this.i}, ${fmt(this.wrId)}, ${fmt(this.length)})`;
  }
}

const opcodes = fc.constantFrom<unknown>(
  'SEND',
  'SEND_WITH_IMM',
  'RDMA_WRITE',
  'RDMA_READ',
  'toString',
  'BOGUS',
  3,
);

class PostSend implements Cmd {
  constructor(
    readonly i: number,
    readonly opcode: unknown,
    readonly length: unknown,
    readonly remoteAddr: unknown,
    readonly imm: unknown,
  ) {}
  check(w: World) {
    return qps(w).length > 0;
  }
  async run(_m: World, w: World) {
    const qp = pick(qps(w), this.i) as MQp;
    const mr = qp.pd.mrs.find((m) => !m.closed);
    const wr: Record<string, unknown> = {
      wrId: 1,
      opcode: this.opcode,
      sgList: [{ addr: mr?.real.addr ?? 4096, length: this.length, lkey: mr?.real.lkey ?? 1 }],
      remoteAddr: this.remoteAddr,
      rkey: mr?.real.rkey ?? 0,
    };
    if (this.imm !== undefined) wr.imm = this.imm;
    let predicted: Code = 'ok';
    const known =
      typeof this.opcode === 'string' &&
      ['SEND', 'SEND_WITH_IMM', 'RDMA_WRITE', 'RDMA_READ'].includes(this.opcode);
    if (qp.closed) predicted = 'ERR_RDMA_CLOSED';
    else if (!known) predicted = 'ERR_RDMA_INVALID_ARG';
    else if (this.opcode === 'SEND_WITH_IMM' && this.imm === undefined)
      predicted = 'ERR_RDMA_INVALID_ARG';
    else
      predicted = first(
        this.imm === undefined ? 'ok' : intCode(this.imm, 0, 2 ** 32 - 1),
        this.opcode === 'RDMA_WRITE' || this.opcode === 'RDMA_READ'
          ? intCode(this.remoteAddr, 0, Number.MAX_SAFE_INTEGER)
          : 'ok',
        intCode(this.length, 0, 2 ** 32 - 1),
      );
    if (predicted === 'ok' && (this.length as number) > qp.pd.dev.real.info.limits.maxMsgSize)
      predicted = 'ERR_RDMA_OUT_OF_RANGE';
    let allowed = [predicted];
    if (predicted === 'ok') {
      if (qp.state === 'rts') allowed = ['ok', 'ERR_RDMA_QUEUE_FULL'];
      else if (qp.state === 'error')
        allowed = ['ok', 'ERR_RDMA_INVALID_STATE', 'ERR_RDMA_QUEUE_FULL'];
      else allowed = ['ERR_RDMA_INVALID_STATE'];
    }
    let got: Code = 'ok';
    try {
      qp.real.postSend(wr as unknown as SendWr);
    } catch (err) {
      if (!(err instanceof RdmaError)) throw new Error(`postSend: non-RdmaError ${String(err)}`);
      got = err.code as Code;
    }
    check(allowed.includes(got), `postSend(${fmt(wr)}) predicted ${allowed.join('|')}, got ${got}`);
    agree(w);
  }
  toString() {
    return `postSend(${this.i}, ${fmt(this.opcode)}, ${fmt(this.length)}, ${fmt(this.remoteAddr)}, ${fmt(this.imm)})`;
  }
}

class Poll implements Cmd {
  constructor(
    readonly i: number,
    readonly n: unknown,
    readonly max: unknown,
  ) {}
  check(w: World) {
    return cqs(w).length > 0;
  }
  async run(_m: World, w: World) {
    const cq = pick(cqs(w), this.i) as MCq;
    const nCode = intCode(this.n, 0, 1 << 20);
    if (nCode !== 'ok') {
      expectOutcome(
        nCode,
        () => allocCompletions(this.n as number),
        `allocCompletions(${fmt(this.n)})`,
      );
      return;
    }
    const out = allocCompletions(Math.min(this.n as number, 64));
    const predicted = cq.closed
      ? 'ERR_RDMA_CLOSED'
      : this.max === undefined
        ? 'ok'
        : intCode(this.max, 0, Number.MAX_SAFE_INTEGER);
    const before = cq.closed ? 0 : cq.real.pending();
    const got = expectOutcome(
      predicted,
      () => cq.real.poll(out, this.max as never),
      `poll(${fmt(this.max)})`,
    );
    if (predicted === 'ok') {
      const limit = Math.min(out.length, (this.max as number | undefined) ?? out.length);
      check(
        typeof got === 'number' && got >= 0 && got <= limit,
        `poll returned ${String(got)} > ${limit}`,
      );
    } else if (!cq.closed) check(cq.real.pending() >= before, 'a refused poll took completions');
    agree(w);
  }
  toString() {
    return `poll(${this.i}, ${fmt(this.n)}, ${fmt(this.max)})`;
  }
}

class Wait implements Cmd {
  constructor(
    readonly i: number,
    readonly options: unknown,
  ) {}
  check(w: World) {
    return cqs(w).length > 0;
  }
  async run(_m: World, w: World) {
    const cq = pick(cqs(w), this.i) as MCq;
    let predicted: Code = cq.closed ? 'ERR_RDMA_CLOSED' : 'ok';
    let bound = 30_000;
    if (!cq.closed) {
      const o = optionsCode(this.options, ['timeoutMs', 'signal', 'spinUs']);
      if (typeof o === 'string') predicted = o;
      else {
        predicted = first(
          numCode(dflt(o.timeoutMs, 30_000), 0, 2 ** 31 - 1),
          numCode(dflt(o.spinUs, 50), 0, 1e6),
        );
        if (predicted === 'ok' && o.signal !== undefined && !(o.signal instanceof AbortSignal))
          predicted = 'ERR_RDMA_INVALID_ARG';
        bound = typeof o.timeoutMs === 'number' ? o.timeoutMs : 30_000;
      }
    }
    if (predicted === 'ok' && bound > 20) return; // waits in the fuzz stay short
    let promise: Promise<void> | undefined;
    expectOutcome(
      predicted,
      () => {
        promise = cq.real.waitForCompletion(this.options as never);
        promise.catch(() => undefined); // judged below; never an unhandled rejection
      },
      `waitForCompletion(${fmt(this.options)})`,
    );
    if (promise) {
      let timer: NodeJS.Timeout | undefined;
      const hang = new Promise<'hang'>((r) => {
        timer = setTimeout(() => r('hang'), bound + 2000);
      });
      const outcome = await Promise.race([
        promise.then(
          () => 'ok',
          (err: unknown) => (err instanceof RdmaError ? err.code : `non-RdmaError ${String(err)}`),
        ),
        hang,
      ]);
      clearTimeout(timer);
      check(outcome === 'ok' || outcome === 'ERR_RDMA_TIMEOUT', `wait ended with ${outcome}`);
    }
    agree(w);
  }
  toString() {
    return `wait(${this.i}, ${fmt(this.options)})`;
  }
}

type Closable =
  | { kind: 'qp'; o: MQp }
  | { kind: 'cq'; o: MCq }
  | { kind: 'srq'; o: MSrq }
  | { kind: 'mr'; o: MMr; pd: MPd }
  | { kind: 'pd'; o: MPd };

function closables(w: World): Closable[] {
  const out: Closable[] = [];
  for (const pd of pds(w)) {
    out.push({ kind: 'pd', o: pd });
    for (const qp of pd.qps) out.push({ kind: 'qp', o: qp });
    for (const s of pd.srqs) out.push({ kind: 'srq', o: s });
    for (const mr of pd.mrs) out.push({ kind: 'mr', o: mr, pd });
  }
  for (const cq of cqs(w)) out.push({ kind: 'cq', o: cq });
  return out;
}

class Close implements Cmd {
  constructor(readonly i: number) {}
  check(w: World) {
    return closables(w).length > 0;
  }
  async run(_m: World, w: World) {
    const c = pick(closables(w), this.i) as Closable;
    let predicted: Code = 'ok';
    if (!c.o.closed) {
      if (c.kind === 'cq' && c.o.users > 0) predicted = 'ERR_RDMA_BUSY';
      if (c.kind === 'srq' && c.o.users > 0) predicted = 'ERR_RDMA_BUSY';
    }
    expectOutcome(predicted, () => c.o.real.close(), `close ${c.kind}`);
    if (predicted === 'ok') {
      if (c.kind === 'qp') closeQp(c.o);
      else if (c.kind === 'pd') closePd(c.o);
      else c.o.closed = true;
    }
    agree(w);
  }
  toString() {
    return `close(${this.i})`;
  }
}

/** toError() or reset(): allowed from every state. */
class Transition implements Cmd {
  constructor(
    readonly i: number,
    readonly to: 'error' | 'reset',
  ) {}
  check(w: World) {
    return qps(w).length > 0;
  }
  async run(_m: World, w: World) {
    const qp = pick(qps(w), this.i) as MQp;
    const call = () => (this.to === 'error' ? qp.real.toError() : qp.real.reset());
    expectOutcome(qp.closed ? 'ERR_RDMA_CLOSED' : 'ok', call, this.to);
    if (!qp.closed) qp.state = this.to;
    agree(w);
  }
  toString() {
    return `${this.to}(${this.i})`;
  }
}

function fmt(v: unknown): string {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'symbol' || typeof v === 'function') return String(v);
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x)) ?? String(v);
  } catch {
    return String(v);
  }
}

const deviceOptions = fc.oneof(
  fc.constant(undefined),
  fc.constant({ provider: 'soft' }),
  fc.record(
    { provider: fc.constantFrom<unknown>('soft', 'auto', 'ibverbs', 'bogus', 42) },
    { requiredKeys: [] },
  ),
  fc.record({
    provider: fc.constant('soft'),
    link: fc.constantFrom<unknown>('auto', 'tcp', 'udp', 1),
  }),
  fc.record({
    provider: fc.constant('soft'),
    name: fc.constantFrom<unknown>('soft0', 'mlx5_0', 7),
  }),
  hostile,
);

const allCommands = [
  deviceOptions.map((o) => new OpenDevice(o)),
  index.map((i) => new CloseDevice(i)),
  index.map((i) => new AllocPd(i)),
  fc
    .tuple(index, fc.oneof(fc.constant(undefined), fc.record({ capacity: intish }), hostile))
    .map(([i, o]) => new CreateCq(i, o)),
  fc
    .tuple(
      index,
      fc.oneof(fc.integer({ min: 1, max: 1 << 16 }), intish, fc.constant(2 ** 60)),
      fc.oneof(fc.integer({ min: 0, max: 16 }), hostile),
    )
    .map(([i, l, a]) => new AllocMr(i, l, a)),
  fc.tuple(index, fc.option(intish, { nil: undefined })).map(([i, n]) => new CreateSrq(i, n)),
  fc
    .tuple(
      index,
      index,
      fc.option(index, { nil: undefined }),
      fc.option(intish, { nil: undefined }),
      fc.option(hostile, { nil: undefined, freq: 4 }),
    )
    .map(([i, c, s, m, b]) => new CreateQp(i, c, s, m, b)),
  fc.tuple(index, index, endpointTamper).map(([a, b, t]) => new Connect(a, b, t)),
  fc
    .tuple(
      index,
      fc.oneof(fc.nat(100), hostile),
      fc.oneof(fc.integer({ min: 0, max: 64 }), hostile),
    )
    .map(([i, id, l]) => new PostRecv(i, id, l)),
  fc
    .tuple(
      index,
      opcodes,
      fc.oneof(fc.integer({ min: 0, max: 64 }), hostile, fc.constant(2 ** 31 + 1)),
      fc.oneof(fc.nat(1 << 20), hostile),
      fc.option(fc.oneof(fc.nat(), hostile), { nil: undefined }),
    )
    .map(([i, o, l, r, m]) => new PostSend(i, o, l, r, m)),
  fc
    .tuple(
      index,
      fc.oneof(fc.integer({ min: 0, max: 32 }), hostile),
      fc.option(intish, { nil: undefined }),
    )
    .map(([i, n, m]) => new Poll(i, n, m)),
  fc
    .tuple(
      index,
      fc.oneof(
        fc.constant(undefined),
        fc.record(
          {
            timeoutMs: fc.oneof(fc.integer({ min: 0, max: 5 }), hostile),
            spinUs: fc.oneof(fc.integer({ min: 0, max: 20 }), hostile),
          },
          { requiredKeys: ['timeoutMs'] },
        ),
        hostile,
        fc.constant({ timeoutMs: 1, signal: {} }),
      ),
    )
    .map(([i, o]) => new Wait(i, o)),
  index.map((i) => new Close(i)),
  fc
    .tuple(index, fc.constantFrom('error' as const, 'reset' as const))
    .map(([i, to]) => new Transition(i, to)),
];

/** Two soft devices, each with a PD, a CQ, an MR and a QP: sequences start mid-use. */
function startingWorld(): World {
  const w: World = { devices: [], all: [] };
  for (let i = 0; i < 2; i++) {
    const real = openDevice({ provider: 'soft' });
    const d: MDevice = { real, closed: false, pds: [], cqs: [] };
    const pd: MPd = { real: real.allocPd(), dev: d, closed: false, mrs: [], qps: [], srqs: [] };
    const cq: MCq = { real: real.createCq({ capacity: 64 }), dev: d, closed: false, users: 0 };
    const mr: MMr = {
      real: pd.real.allocMr(4096, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead),
      closed: false,
    };
    const qp: MQp = {
      real: pd.real.createQp({ sendCq: cq.real, recvCq: cq.real, maxSendWr: 8, maxRecvWr: 8 }),
      pd,
      closed: false,
      state: 'reset',
      cq,
      srq: undefined,
    };
    cq.users = 1;
    d.pds.push(pd);
    d.cqs.push(cq);
    pd.mrs.push(mr);
    pd.qps.push(qp);
    w.devices.push(d);
    w.all.push(d, pd, cq, mr, qp);
  }
  return w;
}

async function main(): Promise<void> {
  const runs = Number(process.env.FUZZ_RUNS ?? 200);
  const seed =
    process.env.FUZZ_SEED === undefined ? Date.now() ^ process.pid : Number(process.env.FUZZ_SEED);
  const started = Date.now();
  const result = await fc.check(
    fc.asyncProperty(fc.commands(allCommands, { maxCommands: 60, size: 'large' }), async (cmds) => {
      const world = startingWorld();
      try {
        await fc.asyncModelRun(() => ({ model: world, real: world }), cmds);
      } finally {
        for (const d of world.devices) d.real.close();
      }
    }),
    { numRuns: runs, seed },
  );
  const report = {
    runs: result.numRuns,
    calls: callsChecked,
    seed,
    failed: result.failed,
    ms: Date.now() - started,
    counterexample: result.failed ? String(result.counterexample?.[0]) : undefined,
    error: result.failed ? String(result.errorInstance) : undefined,
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exitCode = result.failed ? 1 : 0;
}

await main();
