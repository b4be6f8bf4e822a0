import { describe, expect, it } from 'vitest';
import { LOAD_WINDOW_MS, LoadGate, type LoopTimes } from '../src/internal/LoadGate.js';

// The gate driven by a fake event loop: a clock and cumulative busy / idle times we advance.
function fakeLoop() {
  const s = { now: 1000, idle: 0, active: 0, reads: 0 };
  const times = (): LoopTimes => {
    s.reads++;
    return { idle: s.idle, active: s.active };
  };
  /** `ms` pass, `busy` of them with the loop active. */
  const pass = (ms: number, busy: number) => {
    s.now += ms;
    s.active += busy;
    s.idle += ms - busy;
  };
  return { s, times, now: () => s.now, pass };
}

describe('LoadGate (oneSidedMaxLoad)', () => {
  it('opens while the loop idles, shuts once a window was busy past maxLoad, opens again', () => {
    const f = fakeLoop();
    const g = new LoadGate(0.5, f.times, f.now);
    expect(g.open()).toBe(true); // no window yet: load 0
    f.pass(LOAD_WINDOW_MS, LOAD_WINDOW_MS * 0.9);
    expect(g.load).toBeCloseTo(0.9);
    expect(g.open()).toBe(false);
    f.pass(LOAD_WINDOW_MS, LOAD_WINDOW_MS * 0.1);
    expect(g.open()).toBe(true);
    expect(g.load).toBeCloseTo(0.1);
    f.pass(LOAD_WINDOW_MS * 2, LOAD_WINDOW_MS); // exactly maxLoad: shut (below it only)
    expect(g.open()).toBe(false);
  });

  it('samples the loop once per window, not per pull; keeps the last load within a window', () => {
    const f = fakeLoop();
    const g = new LoadGate(0.5, f.times, f.now);
    const base = f.s.reads;
    f.pass(LOAD_WINDOW_MS, LOAD_WINDOW_MS);
    for (let i = 0; i < 100; i++) expect(g.open()).toBe(false);
    expect(f.s.reads - base).toBe(1);
    f.pass(LOAD_WINDOW_MS / 2, 0); // half a window idle: not sampled yet, still shut
    expect(g.open()).toBe(false);
    expect(f.s.reads - base).toBe(1);
    f.pass(LOAD_WINDOW_MS / 2, 0); // the window since the last sample was idle
    expect(g.open()).toBe(true);
    expect(f.s.reads - base).toBe(2);
  });

  it('maxLoad 1 never shuts (and never samples); 0 never opens', () => {
    const f = fakeLoop();
    const always = new LoadGate(1, f.times, f.now);
    const never = new LoadGate(0, f.times, f.now);
    const reads = f.s.reads;
    f.pass(LOAD_WINDOW_MS, LOAD_WINDOW_MS);
    expect(always.open()).toBe(true);
    expect(f.s.reads).toBe(reads);
    f.pass(LOAD_WINDOW_MS, 0);
    expect(never.open()).toBe(false);
  });

  it('a clock that did not move or times that went nowhere keep the last load', () => {
    const f = fakeLoop();
    const g = new LoadGate(0.5, f.times, f.now);
    f.pass(LOAD_WINDOW_MS, LOAD_WINDOW_MS);
    expect(g.load).toBe(1);
    f.s.now += LOAD_WINDOW_MS; // time passed, the loop's times did not (total 0)
    expect(g.load).toBe(1);
  });

  it('the default source is the real event loop: a load in [0, 1]', () => {
    const g = new LoadGate(0.5);
    const l = g.load;
    expect(l).toBeGreaterThanOrEqual(0);
    expect(l).toBeLessThanOrEqual(1);
  });
});
