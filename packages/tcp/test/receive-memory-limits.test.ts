// Where received payloads go when the receive allocator cannot take them, and what the frame
// parser does once a listener has destroyed the connection (review findings M1, M2, L2).
import { type Region, RegisteredAllocator } from '@rdmajs/allocator';
import {
  type Channel,
  type Connection,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  FrameType,
  type InboundMessage,
} from '@rdmajs/mux';
import { expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';
import { rawPeer } from './rawPeer.js';

const SECRET = 'receive-memory-limits test secret, 32+ bytes';
const LONG = { timeoutMs: 20_000 };
const KiB = 1024;

/** Heap memory "registered" in place (no NIC): a receive allocator with a small limit. */
function heapAllocator(maxRegisteredBytes: number): RegisteredAllocator {
  const region = (bytes: Uint8Array): Region => ({ bytes, addr: 0, lkey: 0, rkey: 0 });
  return new RegisteredAllocator({
    registrar: { register: region, deregister: () => {} },
    arenaBytes: 256 * KiB,
    maxRegisteredBytes,
  });
}

async function connectedPair(transport: TcpTransport) {
  const listener = await transport.listen({ secret: SECRET });
  const accepted = new Promise<Connection>((r) => listener.once('connection', r));
  const client = await new TcpTransport({ frameProtection: 'none' }).connect({
    port: listener.port,
    secret: SECRET,
  });
  const server = await accepted;
  const channel = new Promise<Channel>((r) => server.once('channel', r));
  const out = client.openChannel('c');
  return { listener, client, server, out, inbound: await channel };
}

it('an_empty_message_arrives_with_a_receive_allocator_and_the_connection_stays_open', async () => {
  const t = new TcpTransport({ frameProtection: 'none', receiveAllocator: heapAllocator(1 << 20) });
  const { listener, client, server, out, inbound } = await connectedPair(t);
  try {
    await out.send(new Uint8Array(0), LONG);
    await out.send(new Uint8Array([7]), LONG);
    const empty = await inbound.receive(LONG);
    expect(empty.length).toBe(0);
    empty.release();
    const one = await inbound.receive(LONG);
    expect([...one.bytes]).toEqual([7]);
    one.release();
    expect(server.state).toBe('open');
  } finally {
    client.destroy();
    server.destroy();
    await listener.close();
  }
});

it('payloads_beyond_the_receive_allocators_limit_arrive_intact_in_the_connections_own_memory', async () => {
  // One 256 KiB arena at most; the server holds 48 messages of 16 KiB (768 KiB) unreleased.
  const allocator = heapAllocator(256 * KiB);
  const t = new TcpTransport({ frameProtection: 'none', receiveAllocator: allocator });
  const { listener, client, server, out, inbound } = await connectedPair(t);
  const held: InboundMessage[] = [];
  try {
    for (let i = 0; i < 48; i++) await out.send(new Uint8Array(16 * KiB).fill(i + 1), LONG);
    for (let i = 0; i < 48; i++) {
      const m = await inbound.receive(LONG);
      expect(m.length).toBe(16 * KiB);
      expect(m.bytes[0]).toBe(i + 1);
      expect(m.bytes[16 * KiB - 1]).toBe(i + 1);
      held.push(m);
    }
    // Some went to allocator blocks, the rest past its limit elsewhere: all still intact.
    expect(held.some((m) => m.block !== undefined)).toBe(true);
    expect(held.some((m) => m.block === undefined)).toBe(true);
    for (const [i, m] of held.entries()) expect(m.bytes.every((b) => b === i + 1)).toBe(true);
    expect(server.state).toBe('open');
  } finally {
    for (const m of held) m.release();
    client.destroy();
    server.destroy();
    await listener.close();
  }
});

it('frames_after_a_listener_destroyed_the_connection_are_not_parsed', async () => {
  const listener = await new TcpTransport({ frameProtection: 'none' }).listen({ secret: SECRET });
  try {
    const accepted = new Promise<Connection>((r) => listener.once('connection', r));
    const raw = await rawPeer(listener.port, SECRET, 'none');
    const server = await accepted;
    server.on('error', () => {});
    const opened: number[] = [];
    server.on('channel', (ch: Channel) => {
      opened.push(ch.id);
      server.destroy(new Error('the application gave up'));
    });
    const closed = new Promise((r) => server.once('close', r));
    // Two Opens in one write: the second must not open a channel on a failed connection.
    const name = new TextEncoder().encode('x');
    const wire = new Uint8Array(2 * (FRAME_HEADER_BYTES + name.length));
    for (const [k, channel] of [1, 3].entries()) {
      const at = k * (FRAME_HEADER_BYTES + name.length);
      encodeFrameHeader(wire, at, FrameType.Open, channel, 0, name.length);
      wire.set(name, at + FRAME_HEADER_BYTES);
    }
    raw.bytes(wire);
    await closed;
    expect(opened).toEqual([1]);
    expect(server.state).toBe('failed');
    raw.socket.destroy();
  } finally {
    await listener.close();
  }
});
