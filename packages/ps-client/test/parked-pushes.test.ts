// A push that times out on a live session may still be read by it (queued in its transport):
// its payload must not be reused at once, yet must not be held until the session ends either.
// Heap bytes are left to the GC; registered blocks are parked, bounded: past
// maxParkedPushBytes the session is replaced and closing it gives them back.
import { RdmaTransport } from '@rdmajs/mux';
import { DeduplicationTable, MethodRegistry, RpcServer } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, expect, it } from 'vitest';
import type { ShardLink } from '../src/ShardLink.js';
import { openLink } from './support/openLink.js';

const secret = 'ps-client-parked-pushes-secret-0123456789';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A server whose push handler answers only after 100 ms, and a link to it. */
async function slowLink(
  transport: TcpTransport | RdmaTransport,
  server: TcpTransport | RdmaTransport,
  maxParkedPushBytes?: number,
) {
  const reg = new MethodRegistry();
  reg.register('ps.push', async () => {
    await new Promise((r) => setTimeout(r, 100));
    return new Uint8Array(4);
  });
  const rpc = new RpcServer(reg, {
    key: new Uint8Array(32).fill(3),
    dedup: new DeduplicationTable(),
  });
  const listener = await server.listen({ secret });
  listener.on('connection', (c) => rpc.serve(c));
  cleanups.push(() => listener.close());
  const link = await openLink(
    transport,
    secret,
    listener.port,
    maxParkedPushBytes === undefined ? {} : { maxParkedPushBytes },
  );
  cleanups.push(() => link.close());
  return link;
}

/** 20 pushes of `part()` with a 20 ms deadline, each waited for; their error codes. */
async function timeOut(
  link: ShardLink,
  part: () => Parameters<ShardLink['push']>[2],
  free: () => void,
) {
  const codes = new Set<string>();
  for (let i = 0; i < 20; i++) {
    await link
      .push(link.nextSeq(), 'ps.push', part(), 20, free)
      .catch((e: { code: string }) => codes.add(e.code));
  }
  return [...codes];
}

async function until(ok: () => boolean, ms: number): Promise<void> {
  for (const end = performance.now() + ms; !ok() && performance.now() < end; )
    await new Promise((r) => setTimeout(r, 20));
}

it('heap payloads of timed-out pushes are not held by a live session', async () => {
  const link = await slowLink(new TcpTransport(), new TcpTransport());
  let freed = 0;
  const codes = await timeOut(
    link,
    () => new Uint8Array(1024),
    () => freed++,
  );
  expect(codes).toEqual(['ERR_PS_CLIENT_DEADLINE']);
  await until(() => link.stats().queuedPushes === 0, 3000);
  // Never given back for reuse while the session may read them, never parked either.
  expect(link.stats()).toMatchObject({ state: 'connected', parkedPushBytes: 0 });
  expect(freed).toBe(0);
}, 30_000);

it('registered blocks of timed-out pushes come back while the link stays up', async () => {
  const client = new RdmaTransport();
  cleanups.push(() => client.close());
  const link = await slowLink(client, new RdmaTransport(), 4096);
  const blocks = new Set<unknown>();
  let freed = 0;
  const codes = await timeOut(
    link,
    () => {
      const b = client.allocator.alloc(1024, 'local');
      blocks.add(b);
      return b;
    },
    () => freed++,
  );
  expect(codes).toEqual(['ERR_PS_CLIENT_DEADLINE']);
  // Past 4 KiB parked the session is replaced; the old one's close gives its blocks back.
  // At most 4 KiB stay parked on the live session.
  const settled = () => {
    const parked = link.stats().parkedPushBytes;
    return parked <= 4096 && freed + parked / 1024 === 20;
  };
  await until(settled, 5000);
  expect(settled()).toBe(true);
  expect(freed).toBeGreaterThanOrEqual(16);
  expect(link.stats().parkedPushBytes).toBeLessThanOrEqual(4096);
  expect(link.stats().relinks).toBeGreaterThan(0);
  expect(['connected', 'relinking']).toContain(link.stats().state);
}, 30_000);
