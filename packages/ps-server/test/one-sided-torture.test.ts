import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import {
  decodeStoreViewHeader,
  initRowFn,
  localViewRead,
  readStoreView,
  resolveInit,
  StoreViewReader,
  StoreViewSlotCache,
  ViewKeyStatus,
} from '@rdmajs/ps-wire';
import { describe, expect, it } from 'vitest';
import type { SparseTableConfig } from '../src/index.js';

const READ_BATCHES = 4000;
const KEYS = 24;
const WARM = 3000;

async function torture(config: SparseTableConfig, keySpace: number) {
  const worker = new Worker(fileURLToPath(new URL('./fixtures/worker-boot.mjs', import.meta.url)), {
    workerData: { module: './view-pusher.ts', config, keySpace, batch: 8, maxPushes: 5_000_000 },
    execArgv: ['--conditions=@rdmajs/source'],
  });
  const messages: Array<Record<string, unknown>> = [];
  let wake: (() => void) | null = null;
  worker.on('message', (m) => {
    messages.push(m);
    wake?.();
  });
  const failed = new Promise<never>((_, reject) => worker.once('error', reject));
  const next = async () => {
    while (messages.length === 0)
      await Promise.race([new Promise<void>((r) => (wake = r)), failed]);
    return messages.shift() as Record<string, unknown>;
  };
  try {
    const { region, ctl } = (await next()) as { region: Uint8Array; ctl: Int32Array };
    // Start once the writer runs, so the reads overlap its pushes.
    // Past WARM pushes every key of the space was pushed (8 random keys a push, ≤ 96 keys):
    // a key read absent (its KeyInit row, 0) in a table that never evicts is then a bug.
    for (let spin = 0; Atomics.load(ctl, 1) < WARM + 500 && spin < 4000; spin++)
      await new Promise((r) => setTimeout(r, 5));
    const layout = decodeStoreViewHeader(region, region.byteLength);
    // Slot hints kept across batches (as a client keeps them): most keys are read through a
    // hint while the writer pushes, evicts and reuses their slots.
    const slotCache = new StoreViewSlotCache(256);
    const reader = new StoreViewReader(layout, {
      maxKeys: KEYS,
      init: initRowFn(resolveInit(config.init)),
      windowBuckets: 16,
      slotCache,
    });
    // Byte copies of live shared memory, in list order: what a NIC's READs do.
    const read = localViewRead(region);
    const dim = config.dim;
    const k32 = new Uint32Array(2 * KEYS);
    const out = new Float32Array(KEYS * dim);
    let accepted = 0;
    let withPushes = 0;
    let fallbacks = 0;
    let torn = 0;
    let wrongKey = 0;
    let absent = 0;
    const evicting = config.budgetBytes !== undefined;
    // Integers a row holds exactly: a product that rounds (f16 past 2048) is not checked.
    const exact = config.rowDtype === 'f16' ? 2048 : 2 ** 24;
    const pushesAtStart = Atomics.load(ctl, 1);
    for (let b = 0; b < READ_BATCHES; b++) {
      for (let i = 0; i < KEYS; i++) k32[2 * i] = (b * 7 + i) % keySpace;
      fallbacks += await readStoreView(reader, k32, KEYS, out, read, 4);
      for (let i = 0; i < KEYS; i++) {
        if (reader.status[i] !== ViewKeyStatus.DONE) continue;
        accepted++;
        const v = out[i * dim] as number;
        const key = k32[2 * i] as number;
        if (!(Number.isInteger(v) && v >= 0)) torn++;
        else if (v <= exact && v % (key + 1) !== 0) wrongKey++;
        if (v === 0 && !evicting && Atomics.load(ctl, 1) > WARM) absent++;
        for (let j = 1; j < dim; j++) if (out[i * dim + j] !== v) torn++;
        if (v > 0) withPushes++;
      }
      // Let the writer's thread run between some batches on a 2-vCPU machine.
      if (b % 256 === 255) await new Promise((r) => setImmediate(r));
    }
    const pushesDuring = Atomics.load(ctl, 1) - pushesAtStart;
    Atomics.store(ctl, 0, 1);
    const done = (await next()) as { done: number; evicted: number };
    const { hits, stale } = slotCache;
    return {
      accepted,
      withPushes,
      fallbacks,
      torn,
      wrongKey,
      absent,
      pushesDuring,
      hits,
      stale,
      ...done,
    };
  } finally {
    await worker.terminate();
  }
}

/**
 * No accepted row was torn, another key's, or a present key read as absent; and rows were
 * accepted through slot hints (so these checks cover the hinted reads too).
 */
function expectNoBadRow(r: { torn: number; wrongKey: number; absent: number; hits: number }): void {
  expect(r.torn).toBe(0);
  expect(r.wrongKey).toBe(0);
  expect(r.absent).toBe(0);
  expect(r.hits).toBeGreaterThan(0);
}

// Checked once by accepting every row regardless of its seqs: both cases then accept torn
// rows (hundreds to thousands per run), so the checks below have the power to see them.
describe('one-sided reads under constant pushes (worker thread, shared memory)', () => {
  it('native updates, no eviction: no torn row is accepted and reads make progress', async () => {
    const r = await torture(
      { name: 't', dim: 64, optimizer: { kind: 'sum' }, oneSidedRead: true, maxRows: 64 },
      48,
    );
    expectNoBadRow(r);
    expect(r.pushesDuring).toBeGreaterThan(0);
    expect(r.withPushes).toBeGreaterThan(0);
    expect(r.accepted).toBeGreaterThan(READ_BATCHES); // far more than one key a batch resolved
  });

  it('native updates of a budgeted table (JS admission and LRU eviction): no torn row is accepted', async () => {
    const r = await torture(
      { name: 't', dim: 32, optimizer: { kind: 'sum' }, oneSidedRead: true, budgetBytes: 12_000 },
      96,
    );
    expectNoBadRow(r);
    expect(r.evicted).toBeGreaterThan(0);
    expect(r.withPushes).toBeGreaterThan(0);
    expect(r.accepted).toBeGreaterThan(READ_BATCHES);
  });

  it('f16 rows, JS kernels, LRU eviction and slot reuse: no torn row is accepted', async () => {
    const r = await torture(
      {
        name: 't',
        dim: 48,
        rowDtype: 'f16',
        kernels: 'js',
        optimizer: { kind: 'sum' },
        oneSidedRead: true,
        budgetBytes: 12_000,
      },
      96,
    );
    expectNoBadRow(r);
    expect(r.evicted).toBeGreaterThan(0);
    expect(r.withPushes).toBeGreaterThan(0);
    expect(r.accepted).toBeGreaterThan(READ_BATCHES);
  });
});
