// Shared set-up of the conformance suite: the providers under test and connected QP pairs.
import {
  Access,
  allocCompletions,
  type CompletionQueue,
  type ConnectOptions,
  type Device,
  type MemoryRegion,
  openDevice,
  type ProtectionDomain,
  type ProviderName,
  type QueuePair,
  type WorkCompletion,
} from '../../src/index.js';

/** Providers to run the suite against: RDMAJS_TEST_PROVIDERS=soft,ibverbs (default soft). */
export const providers: ProviderName[] = (process.env.RDMAJS_TEST_PROVIDERS ?? 'soft')
  .split(',')
  .map((p) => p.trim())
  .filter((p): p is ProviderName => p === 'soft' || p === 'ibverbs');

export const ALL = Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead;

export interface Side {
  dev: Device;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  mr: MemoryRegion;
  qp: QueuePair;
}

export interface SideOptions {
  cqCapacity?: number;
  mrBytes?: number;
  mrAccess?: number;
  maxSendWr?: number;
  maxRecvWr?: number;
  maxSge?: number;
  maxInlineData?: number;
}

export function side(provider: ProviderName, o: SideOptions = {}): Side {
  return sideOn(openDevice({ provider }), o);
}

/** A side on an already opened device. */
export function sideOn(dev: Device, o: SideOptions = {}): Side {
  const pd = dev.allocPd();
  const cq = dev.createCq({ capacity: o.cqCapacity ?? 256 });
  const mr = pd.allocMr(o.mrBytes ?? 1 << 16, o.mrAccess ?? ALL);
  const qp = pd.createQp({
    sendCq: cq,
    recvCq: cq,
    maxSendWr: o.maxSendWr ?? 32,
    maxRecvWr: o.maxRecvWr ?? 32,
    maxSendSge: o.maxSge ?? 4,
    maxRecvSge: o.maxSge ?? 4,
    maxInlineData: o.maxInlineData ?? 64,
  });
  return { dev, pd, cq, mr, qp };
}

export interface Pair {
  a: Side;
  b: Side;
  close(): void;
}

/** Two devices in this process with connected QPs. */
export function pair(
  provider: ProviderName,
  o: SideOptions = {},
  c: { a?: ConnectOptions; b?: ConnectOptions } = {},
): Pair {
  return connectSides(side(provider, o), side(provider, o), c);
}

/** Connects the QPs of two sides to each other; closing the pair closes both devices. */
function connectSides(a: Side, b: Side, c: { a?: ConnectOptions; b?: ConnectOptions }): Pair {
  const ea = a.qp.endpoint();
  const eb = b.qp.endpoint();
  a.qp.connect(eb, c.a ?? {});
  b.qp.connect(ea, c.b ?? {});
  return {
    a,
    b,
    close() {
      a.dev.close();
      b.dev.close();
    },
  };
}

/** Two soft devices that reach each other over the TCP link, with connected QPs. */
export async function linkPair(
  o: SideOptions = {},
  c: { a?: ConnectOptions; b?: ConnectOptions } = {},
): Promise<Pair> {
  const da = openDevice({ provider: 'soft', link: 'tcp' });
  const db = openDevice({ provider: 'soft', link: 'tcp' });
  await da.listen();
  await db.listen();
  return connectSides(sideOn(da, o), sideOn(db, o), c);
}

/** Waits for exactly `n` completions (deadline-bound) and returns copies of them. */
export async function collect(
  cq: CompletionQueue,
  n: number,
  timeoutMs = 5000,
): Promise<WorkCompletion[]> {
  const out: WorkCompletion[] = [];
  const wcs = allocCompletions(16);
  const deadline = Date.now() + timeoutMs;
  while (out.length < n) {
    const got = cq.poll(wcs, Math.min(16, n - out.length));
    for (let i = 0; i < got; i++) out.push({ ...(wcs[i] as WorkCompletion) });
    if (out.length >= n) break;
    const left = deadline - Date.now();
    if (left <= 0)
      throw new Error(`expected ${n} completions, got ${out.length}: ${JSON.stringify(out)}`);
    await cq.waitForCompletion({ timeoutMs: left }).catch(() => undefined);
  }
  return out;
}

/** Asserts nothing more arrives within `ms`. */
export async function nothingWithin(cq: CompletionQueue, ms: number): Promise<number> {
  await new Promise((r) => setTimeout(r, ms));
  return cq.pending();
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `cond()` holds, polling every few ms; fails after `timeoutMs`. */
export async function until(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}
