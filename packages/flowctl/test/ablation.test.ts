/**
 * The ablation the paper's lesson rests on: every guarantee shown elsewhere, run again with
 * the mechanism behind it turned off, and what breaks asserted.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, SendWindow } from '../src/index.js';
import { flush, track } from './helpers.js';
import { runBidirectional } from './sim/bidirectional.js';
import { runIncast } from './sim/incast.js';

const CREDITS = 8;
const WINDOW_BYTES = 16 * 1024;
const NS = [16, 64, 256] as const;

describe('ablation: credits', () => {
  it('without credits, peers overrun each other’s receive buffers (the property fails)', () => {
    const prop = fc.property(
      fc.integer({ min: 1, max: 40 }),
      fc.array(fc.nat({ max: 7 }), { maxLength: 400 }),
      (messages, choices) =>
        runBidirectional({ messages, credits: 3, reserve: true, creditsEnforced: false }, choices)
          .overruns === 0,
    );
    const out = fc.check(prop, { numRuns: 200, seed: 1 });
    expect(out.failed).toBe(true);
    // the plainest case: 4 messages into 3 buffers nobody has released yet
    const r = runBidirectional(
      { messages: 4, credits: 3, reserve: true, creditsEnforced: false },
      [0, 0, 0, 0],
    );
    expect(r.overruns).toBeGreaterThan(0);
  });

  it('without the reserved credit, two peers that both spend their last credit deadlock', () => {
    const prop = fc.property(
      fc.integer({ min: 3, max: 40 }),
      fc.array(fc.nat({ max: 7 }), { maxLength: 400 }),
      (messages, choices) =>
        runBidirectional({ messages, credits: 3, reserve: false }, choices).outcome === 'completed',
    );
    const out = fc.check(prop, { numRuns: 200, seed: 1 });
    expect(out.failed).toBe(true);
    // and deterministically: both send 3 data messages at once, receive, owe 3 each, and
    // neither holds a credit to say so
    const r = runBidirectional({ messages: 5, credits: 3, reserve: false }, []);
    expect(r.outcome).toBe('deadlock');
    expect(r.minAvailable).toBe(0);
    // the same run with the reserve completes
    expect(runBidirectional({ messages: 5, credits: 3, reserve: true }, []).outcome).toBe(
      'completed',
    );
  });

  it('incast without credits: the receiver is overrun (RNR) at every N, more with larger N', () => {
    const overruns: number[] = [];
    for (const senders of NS) {
      const r = runIncast({
        senders,
        messagesPerSender: 48,
        seed: 7,
        credits: false,
        window: true,
      });
      expect(r.overruns).toBeGreaterThan(0);
      expect(r.delivered).toBeLessThan(r.expected); // refused messages never got through
      overruns.push(r.overruns);
    }
    expect(overruns[1]).toBeGreaterThan(overruns[0] as number);
    expect(overruns[2]).toBeGreaterThan(overruns[1] as number);
  });

  it('incast without credits but with buffers that grow: no overruns, unbounded memory', () => {
    const mem: number[] = [];
    for (const senders of NS) {
      const r = runIncast({
        senders,
        messagesPerSender: 48,
        seed: 7,
        credits: false,
        window: false,
        elasticBuffers: true,
      });
      expect(r.overruns).toBe(0);
      // far past what credits would have bounded it to
      expect(r.maxReceiverBuffersInUse).toBeGreaterThan(senders * CREDITS);
      // and unfair: senders with faster links grab the receiver first
      expect(r.jain).toBeLessThan(0.9);
      mem.push(r.maxReceiverBuffersInUse);
    }
    expect(mem[1]).toBeGreaterThan(3 * (mem[0] as number));
    expect(mem[2]).toBeGreaterThan(3 * (mem[1] as number));
    // and it grows with the burst too, where flow control keeps it flat
    const big = runIncast({
      senders: 64,
      messagesPerSender: 96,
      seed: 7,
      credits: false,
      window: false,
      elasticBuffers: true,
    });
    expect(big.maxReceiverBuffersInUse).toBeGreaterThan(1.5 * (mem[1] as number));
  });
});

describe('ablation: send window', () => {
  it('incast without the window: senders exceed it and the switch queue passes N × window', () => {
    const peaks: number[] = [];
    for (const senders of NS) {
      const r = runIncast({
        senders,
        messagesPerSender: 48,
        seed: 7,
        credits: true,
        window: false,
      });
      expect(r.overruns).toBe(0); // credits alone still protect the receiver...
      expect(r.maxSenderBytesInFlight).toBeGreaterThan(WINDOW_BYTES); // ...but not the network
      expect(r.maxSwitchQueueBytes).toBeGreaterThan(senders * WINDOW_BYTES);
      peaks.push(r.maxSwitchQueueBytes);
    }
    expect(peaks[2]).toBeGreaterThan(peaks[1] as number);
    expect(peaks[1]).toBeGreaterThan(peaks[0] as number);
  });

  it('incast with no flow control at all: overruns and a switch queue holding the whole burst', () => {
    for (const senders of NS) {
      const on = runIncast({
        senders,
        messagesPerSender: 48,
        seed: 7,
        credits: true,
        window: true,
      });
      const off = runIncast({
        senders,
        messagesPerSender: 48,
        seed: 7,
        credits: false,
        window: false,
      });
      expect(off.overruns).toBeGreaterThan(0);
      expect(off.maxSwitchQueueMessages).toBeGreaterThan(3 * on.maxSwitchQueueMessages);
      expect(off.maxSwitchQueueBytes).toBeGreaterThan(3 * on.maxSwitchQueueBytes);
    }
  });
});

describe('ablation: deadlines and fair queueing', () => {
  it('a wait without a deadline hangs when capacity never returns; acquire rejects at its deadline', async () => {
    const clock = new ManualClock();
    const w = new SendWindow({ maxBytes: 100, maxMessages: 4, clock });
    w.tryAcquire(100); // the peer died: this is never released
    // without flowctl's deadline: wait for 'drain' by hand
    const naive = track(new Promise<void>((resolve) => w.once('drain', resolve)));
    expect(w.tryAcquire(10)).toBe(false);
    const bounded = track(w.acquire(10, { timeoutMs: 1000 }));
    clock.advance(3_600_000);
    await flush();
    expect(naive.state).toBe('pending'); // forever
    expect(bounded.state).toBe('rejected');
    expect(bounded.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
  });

  it('greedy first-fit starves a large message under a stream of small ones; DRR does not', async () => {
    const WINDOW = 64 * 1024;
    const LARGE = 60 * 1024;
    const SMALL = 256;
    const STREAM = 4000;

    // Both start with the window full of small sends and the same queue: the large message
    // first, then the stream. Sends complete in the order they went out.
    const initial = Array.from({ length: WINDOW / SMALL }, () => SMALL);

    // Greedy: whenever space frees, send the first waiting message that fits.
    const waiting: number[] = [LARGE, ...Array.from({ length: STREAM }, () => SMALL)];
    const inFlight: number[] = [...initial];
    let used = WINDOW;
    const greedyOrder: number[] = [];
    while (waiting.length > 0) {
      used -= inFlight.shift() as number;
      for (let i = 0; i < waiting.length; ) {
        const b = waiting[i] as number;
        if (used + b > WINDOW) {
          i++;
          continue;
        }
        used += b;
        inFlight.push(b);
        greedyOrder.push(b);
        waiting.splice(i, 1);
      }
    }
    // every small message went first: the large one waited for the whole stream
    expect(greedyOrder.indexOf(LARGE)).toBe(STREAM);

    // SendWindow (deficit round-robin, the chosen send holds the line) on the same load
    const w = new SendWindow({
      maxBytes: WINDOW,
      maxMessages: 1024,
      quantumBytes: 4096,
      maxQueued: STREAM + 10,
      clock: new ManualClock(),
    });
    for (const b of initial) expect(w.tryAcquire(b)).toBe(true);
    const order: number[] = [];
    w.acquire(LARGE, { channel: 0, timeoutMs: 1e9 }).then(() => order.push(LARGE));
    for (let i = 0; i < STREAM; i++) {
      w.acquire(SMALL, { channel: 1, timeoutMs: 1e9 }).then(() => order.push(SMALL));
    }
    for (const b of initial) w.release(b);
    let done = 0;
    while (done < STREAM + 1) {
      await flush();
      const upto = order.length;
      expect(upto).toBeGreaterThan(done);
      for (; done < upto; done++) w.release(order[done] as number);
    }
    const at = order.indexOf(LARGE);
    expect(at).toBeGreaterThanOrEqual(0);
    // the small channel got about the large message's bytes first (one quantum per round
    // each), then the large one went: a share, not the whole stream
    expect(at * SMALL).toBeLessThanOrEqual(LARGE + 4096);
    expect(at).toBeLessThan(STREAM / 10);
  });
});
