import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, SendWindow } from '../src/index.js';
import { flush } from './helpers.js';

interface Dispatch {
  readonly channel: number;
  readonly bytes: number;
}

/**
 * Queues every send while the window is held full (bytes and messages), then completes sends in the order they
 * were dispatched until all are through. Returns the dispatch order.
 */
async function runQueued(
  window: SendWindow,
  sends: readonly Dispatch[],
  blocker: number,
): Promise<Dispatch[]> {
  const order: Dispatch[] = [];
  expect(window.tryAcquire(blocker)).toBe(true);
  let empties = 0; // fill the message count too, so even 0-byte sends must queue
  while (window.tryAcquire(0)) empties++;
  for (const s of sends) {
    window.acquire(s.bytes, { channel: s.channel, timeoutMs: 1e9 }).then(() => order.push(s));
  }
  await flush();
  expect(order).toHaveLength(0);
  window.release(blocker);
  for (; empties > 0; empties--) window.release(0);
  let released = 0;
  while (released < sends.length) {
    await flush();
    const upto = order.length;
    expect(upto).toBeGreaterThan(released); // progress every round: nothing is stuck
    for (; released < upto; released++) window.release((order[released] as Dispatch).bytes);
  }
  return order;
}

function bytesBy(order: readonly Dispatch[], channel: number, upto = order.length): number {
  let sum = 0;
  for (let i = 0; i < upto; i++) if (order[i]?.channel === channel) sum += order[i]?.bytes ?? 0;
  return sum;
}

describe('SendWindow fairness across channels (deficit round-robin by bytes)', () => {
  it('gives a channel of large messages and a channel of small ones the same bytes', async () => {
    const w = new SendWindow({
      maxBytes: 64 * 1024,
      maxMessages: 64,
      quantumBytes: 8 * 1024,
      maxQueued: 10_000,
      clock: new ManualClock(),
    });
    const sends: Dispatch[] = [];
    for (let i = 0; i < 64; i++) sends.push({ channel: 0, bytes: 32 * 1024 });
    for (let i = 0; i < 4096; i++) sends.push({ channel: 1, bytes: 512 });
    const order = await runQueued(w, sends, 64 * 1024);
    // while both are backlogged (up to the point where one runs dry)
    let lastLarge = 0;
    let lastSmall = 0;
    order.forEach((d, i) => {
      if (d.channel === 0) lastLarge = i;
      else lastSmall = i;
    });
    const both = Math.min(lastLarge, lastSmall);
    const large = bytesBy(order, 0, both);
    const small = bytesBy(order, 1, both);
    expect(large / small).toBeGreaterThan(0.9);
    expect(large / small).toBeLessThan(1.1);
    // and by count the small channel sends ~64 messages per large one
    expect(order.slice(0, both).filter((d) => d.channel === 1).length).toBeGreaterThan(
      32 * order.slice(0, both).filter((d) => d.channel === 0).length,
    );
  });

  it('does not let a stream of small messages starve one large message', async () => {
    const w = new SendWindow({
      maxBytes: 64 * 1024,
      maxMessages: 64,
      quantumBytes: 4 * 1024,
      maxQueued: 10_000,
      clock: new ManualClock(),
    });
    const sends: Dispatch[] = [];
    for (let i = 0; i < 2000; i++) sends.push({ channel: 1, bytes: 256 });
    sends.push({ channel: 0, bytes: 60 * 1024 });
    const order = await runQueued(w, sends, 64 * 1024);
    const at = order.findIndex((d) => d.channel === 0);
    // the large one goes once its deficit (one quantum per round) reaches 60 KiB: the small
    // channel gets at most the same bytes plus one turn in the meantime
    expect(bytesBy(order, 1, at)).toBeLessThanOrEqual(60 * 1024 + 4 * 1024);
    expect(at).toBeLessThan(order.length - 1500);
  });

  it('does not let a stream of large messages starve one small message', async () => {
    const w = new SendWindow({
      maxBytes: 64 * 1024,
      maxMessages: 64,
      quantumBytes: 16 * 1024,
      clock: new ManualClock(),
    });
    const sends: Dispatch[] = [];
    for (let i = 0; i < 100; i++) sends.push({ channel: 0, bytes: 60 * 1024 });
    sends.push({ channel: 1, bytes: 100 });
    const order = await runQueued(w, sends, 64 * 1024);
    const at = order.findIndex((d) => d.channel === 1);
    expect(at).toBeLessThanOrEqual(2);
  });

  it('keeps any two backlogged channels within one quantum plus two messages of each other', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 2048 }),
        fc.array(fc.array(fc.integer({ min: 0, max: 4096 }), { minLength: 1, maxLength: 40 }), {
          minLength: 2,
          maxLength: 5,
        }),
        fc.integer({ min: 1, max: 16 }),
        async (quantum, perChannel, maxMessages) => {
          const w = new SendWindow({
            maxBytes: 8192,
            maxMessages,
            quantumBytes: quantum,
            clock: new ManualClock(),
          });
          const sends: Dispatch[] = [];
          perChannel.forEach((sizes, channel) => {
            for (const bytes of sizes) sends.push({ channel, bytes });
          });
          const order = await runQueued(w, sends, 8192);
          expect(order).toHaveLength(sends.length);
          const maxMsg = Math.max(...sends.map((s) => s.bytes));
          const remaining = perChannel.map((s) => s.length);
          const sent = perChannel.map(() => 0);
          for (const d of order) {
            sent[d.channel] = (sent[d.channel] as number) + d.bytes;
            remaining[d.channel] = (remaining[d.channel] as number) - 1;
            for (let i = 0; i < sent.length; i++) {
              for (let j = 0; j < sent.length; j++) {
                // compare only while both still have sends waiting
                if ((remaining[i] as number) > 0 && (remaining[j] as number) > 0) {
                  expect((sent[i] as number) - (sent[j] as number)).toBeLessThanOrEqual(
                    quantum + 2 * maxMsg,
                  );
                }
              }
            }
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
