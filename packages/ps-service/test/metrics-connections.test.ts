import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_METRICS_CONNECTIONS, ServiceMetrics } from '../src/index.js';

// The metrics endpoint has no authentication: its connections are capped, the oldest dropped
// for a new one, so idle sockets can neither grow without bound nor lock the scraper out.

const sockets: Socket[] = [];
let metrics: ServiceMetrics | undefined;
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await metrics?.close();
});

function idle(port: number): Promise<{ sock: Socket; closed: () => boolean }> {
  return new Promise((resolve, reject) => {
    let closed = false;
    const sock = connect(port, '127.0.0.1', () => resolve({ sock, closed: () => closed }));
    sock.on('error', () => {});
    sock.once('close', () => {
      closed = true;
    });
    sock.once('error', reject);
    sockets.push(sock);
  });
}

describe('metrics endpoint connection cap', () => {
  it('idle_connections_beyond_the_cap_drop_the_oldest_and_scrapes_still_work', async () => {
    metrics = new ServiceMetrics(
      { shard: 'm0' },
      {
        connections: () => 0,
        inFlight: () => 0,
        sessionsResumed: () => 0,
        receiveQueueEmptied: () => 0,
      },
    );
    const port = await metrics.serve('127.0.0.1', 0);
    const extra = 10;
    const held: { sock: Socket; closed: () => boolean }[] = [];
    for (let i = 0; i < MAX_METRICS_CONNECTIONS + extra; i++) held.push(await idle(port));
    // The first `extra` (the oldest) were dropped for the newer ones; the rest stay open.
    await vi.waitFor(() => {
      expect(held.slice(0, extra).every((h) => h.closed())).toBe(true);
    });
    expect(held.slice(extra).filter((h) => h.closed())).toHaveLength(0);
    // A scrape gets through while the cap is full (it drops the oldest idle socket).
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(res.status).toBe(200);
    expect(await res.text()).toMatch(/rdmajs_ps_connections\{shard="m0"\} 0/);
    await vi.waitFor(() => expect(held[extra]?.closed()).toBe(true));
    expect(held.slice(extra + 1).filter((h) => h.closed())).toHaveLength(0);
  });
});
