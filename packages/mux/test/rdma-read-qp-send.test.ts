// The read QP carries one-sided READs only: a SEND a peer posts on it is a protocol error,
// never taken as a channel frame. The peer is hand-rolled (test/support/roguePeer.ts).
import { afterEach, expect, it } from 'vitest';
import { type MuxError, type RdmaConnection, RdmaTransport } from '../src/index.js';
import { encodeWireHeader, WIRE_HEADER_BYTES, WireType } from '../src/internal/WireHeader.js';
import { roguePeer } from './support/roguePeer.js';

const SECRET = 'read qp send test secret, 32+ bytes!!';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a_send_on_the_read_qp_fails_the_connection_with_a_protocol_error_not_a_channel', async () => {
  const server = new RdmaTransport();
  const listener = await server.listen({ secret: SECRET });
  cleanups.push(async () => {
    await listener.close();
    server.close();
  });
  const failed = new Promise<{ err: MuxError; channels: number }>((resolve) => {
    listener.on('connection', (c) => {
      const conn = c as RdmaConnection;
      cleanups.push(() => conn.destroy());
      let channels = 0;
      conn.on('channel', () => channels++);
      conn.on('error', (err) => resolve({ err: err as MuxError, channels }));
    });
  });
  const rogue = await roguePeer(listener.port, SECRET);
  cleanups.push(() => rogue.close());
  // A well-formed Open frame, but on the read QP (the rogue's qps[1], connected to ours).
  const slot = rogue.alloc.alloc(WIRE_HEADER_BYTES);
  encodeWireHeader(slot.bytes, WireType.Open, 1, 0, 0);
  const readQp = rogue.resources.qps[1];
  if (readQp === undefined) throw new Error('no read qp');
  readQp.postSend({ wrId: 7, opcode: 'SEND', sgList: [slot.sge(0, WIRE_HEADER_BYTES)] });
  const { err, channels } = await failed;
  expect(err.code).toBe('ERR_MUX_PROTOCOL');
  expect(err.message).toMatch(/read QP/);
  expect(channels).toBe(0);
});
