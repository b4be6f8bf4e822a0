// The RDMA control connection seals every message with the handshake's session keys: what a
// relay alters, replays, reorders or injects never reaches the connection.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Handshake, type HandshakeLimits, type SessionKeys } from '../src/index.js';
import { ControlLink, ControlType } from '../src/internal/ControlLink.js';
import { CONTROL_TAG_BYTES, ControlSealer } from '../src/internal/ControlSeal.js';

const limits: HandshakeLimits = { maxFrameBytes: 1 << 20, windowBytes: 1 << 20, windowMessages: 8 };
const secret = 'control link test secret (test only)';

/** Session keys of a real handshake: the client's, and the server's. */
function keyPair(): { client: SessionKeys; server: SessionKeys } {
  const c = new Handshake({ role: 'client', secret, limits, transport: 'rdma' });
  const s = new Handshake({ role: 'server', secret, limits, transport: 'rdma' });
  c.receive(s.receive(c.receive(s.receive(c.start()) as Uint8Array) as Uint8Array) as Uint8Array);
  return { client: c.sessionKeys as SessionKeys, server: s.sessionKeys as SessionKeys };
}

const sockets: net.Socket[] = [];
const servers: net.Server[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) s.close();
});

/** A ControlLink on the server side of a loopback socket, and the raw client socket. */
async function linked(keys: SessionKeys) {
  const server = net.createServer();
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const raw = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  sockets.push(raw);
  raw.on('error', () => {});
  const socket = await accepted;
  sockets.push(socket);
  const link = new ControlLink(socket, new Uint8Array(0), keys);
  const got: Array<[number, Buffer]> = [];
  const closed = new Promise<Error | undefined>((resolve) =>
    link.setHandlers({ message: (t, p) => got.push([t, Buffer.from(p)]), closed: resolve }),
  );
  return { raw, link, got, closed };
}

function flip(frame: Buffer, at: number): Buffer {
  frame[at] = (frame[at] as number) ^ 1;
  return frame;
}

describe('control link sealing', () => {
  it('sealed_messages_arrive_in_order_and_what_a_link_sends_is_not_in_clear', async () => {
    const keys = keyPair();
    const { raw, link, got } = await linked(keys.server);
    const sealer = new ControlSealer(keys.client.send);
    const setup = Buffer.from('a setup that names memory keys');
    raw.write(sealer.seal(ControlType.Setup, setup));
    raw.write(sealer.seal(ControlType.Ping, undefined));
    await expect.poll(() => got.length).toBe(2);
    expect(got[0]).toEqual([ControlType.Setup, setup]);
    expect(got[1]).toEqual([ControlType.Ping, Buffer.alloc(0)]);
    // The other direction: our link's setup is on the wire only sealed.
    const wire: Buffer[] = [];
    raw.on('data', (c: Buffer) => wire.push(c));
    link.send(ControlType.Setup, setup);
    await expect.poll(() => Buffer.concat(wire).length).toBe(5 + setup.length + CONTROL_TAG_BYTES);
    expect(Buffer.concat(wire).includes(setup)).toBe(false);
  });

  const setupFrame = (sealer: ControlSealer) => sealer.seal(ControlType.Setup, Buffer.alloc(32, 7));
  it.each([
    ['a flipped payload byte', (sealer: ControlSealer) => flip(setupFrame(sealer), 7)],
    ['a flipped tag byte', (sealer: ControlSealer) => flip(setupFrame(sealer), 5 + 32 + 15)],
    [
      // Ping and Ready both have no payload, so only the tag can tell them apart.
      'a rewritten type in the header',
      (sealer: ControlSealer) => {
        const ping = sealer.seal(ControlType.Ping, undefined);
        ping.writeUInt8(ControlType.Ready, 4);
        return ping;
      },
    ],
  ])('%s_fails_with_ERR_MUX_INTEGRITY_and_nothing_is_delivered', async (_what, frame) => {
    const keys = keyPair();
    const { raw, got, closed } = await linked(keys.server);
    raw.write(frame(new ControlSealer(keys.client.send)));
    expect(await closed).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
    expect(got).toEqual([]);
  });

  it('a_replayed_message_fails_with_ERR_MUX_INTEGRITY', async () => {
    const keys = keyPair();
    const { raw, got, closed } = await linked(keys.server);
    const ping = new ControlSealer(keys.client.send).seal(ControlType.Ping, undefined);
    raw.write(ping);
    raw.write(ping);
    expect(await closed).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
    expect(got.map(([t]) => t)).toEqual([ControlType.Ping]);
  });

  it('messages_reordered_on_the_way_fail_with_ERR_MUX_INTEGRITY', async () => {
    const keys = keyPair();
    const { raw, got, closed } = await linked(keys.server);
    const sealer = new ControlSealer(keys.client.send);
    const first = sealer.seal(ControlType.Ping, undefined);
    const second = sealer.seal(ControlType.Ready, undefined);
    raw.write(second);
    raw.write(first);
    expect(await closed).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
    expect(got).toEqual([]);
  });

  it.each([
    ['the key of the other direction', (k: { client: SessionKeys }) => k.client.receive],
    ['another connection', () => keyPair().client.send],
    ['no key at all (an unsealed frame)', undefined],
  ])('a_message_sealed_with_%s_fails_with_ERR_MUX_INTEGRITY', async (_what, pick) => {
    const keys = keyPair();
    const { raw, got, closed } = await linked(keys.server);
    if (pick === undefined) {
      // What a peer of protocol v1 sent: header and payload, no tag. A tag's worth of
      // further bytes completes the frame as far as the receiver can tell.
      const head = Buffer.alloc(5);
      head.writeUInt32BE(4, 0);
      head.writeUInt8(ControlType.Setup, 4);
      raw.write(Buffer.concat([head, Buffer.from('junk'), Buffer.alloc(CONTROL_TAG_BYTES)]));
    } else {
      raw.write(new ControlSealer(pick(keys)).seal(ControlType.Ping, undefined));
    }
    expect(await closed).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
    expect(got).toEqual([]);
  });

  it('a_length_over_the_setup_limit_is_refused_before_anything_is_buffered', async () => {
    const keys = keyPair();
    const { raw, closed } = await linked(keys.server);
    const head = Buffer.alloc(5);
    head.writeUInt32BE(1 << 30, 0);
    head.writeUInt8(ControlType.Setup, 4);
    raw.write(head);
    expect(await closed).toMatchObject({ code: 'ERR_MUX_PROTOCOL' });
  });
});
