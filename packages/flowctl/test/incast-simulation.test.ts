import { describe, expect, it } from 'vitest';
import { runIncast } from './sim/incast.js';

const CREDITS = 8;
const WINDOW_BYTES = 16 * 1024;

describe('incast: N senders → 1 slow receiver, with flow control (virtual time, seeded)', () => {
  for (const senders of [16, 64, 256]) {
    it(`N=${senders}: zero overruns, bounded memory and queues, fair shares`, () => {
      const r = runIncast({ senders, messagesPerSender: 48, seed: 7, credits: true, window: true });
      // everything arrives, nothing is refused by the receiver (no RNR)
      expect(r.quiesced).toBe(true);
      expect(r.delivered).toBe(r.expected);
      expect(r.overruns).toBe(0);
      // receiver memory: never more buffers in use than credits handed out
      expect(r.maxReceiverBuffersInUse).toBeLessThanOrEqual(senders * CREDITS);
      // the switch holds at most every sender's window; no sender exceeds its own
      expect(r.maxSenderBytesInFlight).toBeLessThanOrEqual(WINDOW_BYTES);
      expect(r.maxSwitchQueueBytes).toBeLessThanOrEqual(senders * WINDOW_BYTES);
      // fairness across senders while all are backlogged
      expect(r.jain).toBeGreaterThanOrEqual(0.9);
      // credits came back both ways, and all of them: nothing leaked
      expect(r.piggybackReturns).toBeGreaterThan(0);
      expect(r.explicitUpdates).toBeGreaterThan(0);
      expect(r.creditsConserved).toBe(true);
      // senders really were held back (the mechanisms were exercised, not idle)
      expect(r.creditStalls).toBeGreaterThan(0);
      expect(r.windowStalls).toBeGreaterThan(0);
    });
  }

  it('keeps the same bounds when the burst is four times larger (bounded, not just lucky)', () => {
    const small = runIncast({
      senders: 64,
      messagesPerSender: 24,
      seed: 3,
      credits: true,
      window: true,
    });
    const large = runIncast({
      senders: 64,
      messagesPerSender: 96,
      seed: 3,
      credits: true,
      window: true,
    });
    expect(large.overruns).toBe(0);
    expect(large.delivered).toBe(large.expected);
    expect(large.maxReceiverBuffersInUse).toBeLessThanOrEqual(64 * CREDITS);
    expect(large.maxSwitchQueueBytes).toBeLessThanOrEqual(64 * WINDOW_BYTES);
    // queues do not grow with the burst: within 10 % of the small burst's peaks
    expect(large.maxReceiverBuffersInUse).toBeLessThanOrEqual(small.maxReceiverBuffersInUse * 1.1);
    expect(large.maxSwitchQueueBytes).toBeLessThanOrEqual(small.maxSwitchQueueBytes * 1.1);
  });

  it('is deterministic: the same seed gives the same run', () => {
    const a = runIncast({
      senders: 32,
      messagesPerSender: 16,
      seed: 11,
      credits: true,
      window: true,
    });
    const b = runIncast({
      senders: 32,
      messagesPerSender: 16,
      seed: 11,
      credits: true,
      window: true,
    });
    expect(b).toEqual(a);
  });
});
