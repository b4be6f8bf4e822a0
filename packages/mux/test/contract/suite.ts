// The messaging contract, run against any Transport: each implementation's tests call
// describeTransportContract with a ContractTarget (a factory and a peer script). Every peer
// is a real process on loopback. No timing assertions beyond generous failure deadlines.
import { type Region, RegisteredAllocator } from '@rdmajs/allocator';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Channel, Connection, InboundMessage, MessagePart } from '../../src/index.js';
import type { ContractTarget } from './ContractTarget.js';
import { fillPattern, prng, sizeMix } from './pattern.js';
import { type ContractPeer, spawnContractPeer } from './spawnPeer.js';

const MiB = 1024 * 1024;
const SECRET = 'contract-suite shared secret (test only)';
const LONG = { timeoutMs: 120_000 };

/** Plain memory as "registered" memory: the contract needs blocks, not a NIC. */
/** A transport with a receive allocator, and the allocator to check: the target's own, if any. */
function withReceiveAllocator(target: ContractTarget) {
  const given = heapAllocator();
  const transport = target.transport({ receiveAllocator: given });
  const alloc = target.receiveAllocatorOf?.(transport, given) ?? given;
  return { transport, alloc };
}

export function heapAllocator(): RegisteredAllocator {
  let addr = 0x1000_0000;
  return new RegisteredAllocator({
    registrar: {
      register(bytes: Uint8Array): Region {
        const r = { bytes, addr, lkey: 1, rkey: 2 };
        addr += Math.ceil((bytes.length + 1) / 4096) * 4096;
        return r;
      },
      deregister() {},
    },
    arenaBytes: 4 * MiB,
    maxArenaBytes: 32 * MiB,
  });
}

function codeOf(err: unknown): string | undefined {
  return (err as { code?: string } | undefined)?.code;
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

const FAILURE_CODES = ['ERR_MUX_CONNECTION_LOST', 'ERR_MUX_PEER_TIMEOUT'];

export function describeTransportContract(target: ContractTarget): void {
  describe(`transport contract: ${target.name}`, () => {
    const cleanups: Array<() => Promise<void> | void> = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    describe('with an echo peer', () => {
      let peer: ContractPeer;
      beforeAll(async () => {
        peer = await spawnContractPeer(target.peerScript, SECRET);
      });
      afterAll(async () => {
        await peer?.kill();
      });

      async function connect(): Promise<Connection> {
        const conn = await target.transport({}).connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        return conn;
      }

      it('ten_thousand_channels_carry_their_messages_in_order_over_one_connection', async () => {
        const conn = await connect();
        const N = 10_000;
        const channels: Channel[] = [];
        for (let i = 0; i < N; i++) channels.push(conn.openChannel('echo'));
        expect(conn.channelCount).toBe(N);
        expect(new Set(channels.map((c) => c.id)).size).toBe(N);
        const enc = new TextEncoder();
        const dec = new TextDecoder();
        await Promise.all(
          channels.map(async (ch, i) => {
            await ch.send(enc.encode(`first ${i}`), LONG);
            await ch.send(enc.encode(`second ${i}`), LONG);
          }),
        );
        await Promise.all(
          channels.map(async (ch, i) => {
            const a = await ch.receive(LONG);
            const b = await ch.receive({ ...LONG, copy: true });
            expect([a.seq, b.seq]).toEqual([0, 1]);
            expect(dec.decode(a.bytes)).toBe(`first ${i}`);
            expect(dec.decode(b.bytes)).toBe(`second ${i}`);
            a.release();
            b.release();
          }),
        );
        const s = conn.stats();
        expect(s.messagesReceived).toBe(2 * N);
        expect(s.messagesSent).toBe(2 * N);
        // The peer released all it received: its credits gave the whole send window back.
        await expect.poll(() => conn.stats().sendWindowBytes, { timeout: 60_000 }).toBe(0);
        await Promise.all(channels.map((ch) => ch.close(LONG)));
        await conn.close(LONG);
        expect(conn.state).toBe('closed');
        expect(conn.channelCount).toBe(0);
      });

      it('either_side_opens_channels_the_other_sees_in_its_channel_event', async () => {
        const conn = await connect();
        const seen: Channel[] = [];
        conn.on('channel', (ch) => seen.push(ch));
        const ask = conn.openChannel('reverse:50');
        await ask.send(new Uint8Array(0));
        const names = new Set<string>();
        const dec = new TextDecoder();
        while (names.size < 50) {
          await new Promise((r) => setTimeout(r, 10));
          for (const ch of seen.splice(0)) {
            expect(ch.id % 2).toBe(0); // the server's ids
            const m = await ch.receive(LONG);
            expect(dec.decode(m.bytes)).toBe(`reply ${ch.name.slice(1)}`);
            m.release();
            // The peer closed it after its one message.
            expect(codeOf(await rejection(ch.receive(LONG)))).toBe('ERR_MUX_CLOSED');
            names.add(ch.name);
            await ch.close();
          }
        }
        await conn.close(LONG);
      });

      it('a_listener_takes_queued_then_arriving_messages_in_order_and_hears_the_end_once', async () => {
        const conn = await connect();
        const ch = conn.openChannel('echo');
        const enc = new TextEncoder();
        const dec = new TextDecoder();
        const N = 200;
        for (let i = 0; i < N / 2; i++) await ch.send(enc.encode(`m${i}`), LONG);
        // The first echo by receive(); the rest of the first half queued or in flight.
        const first = await ch.receive(LONG);
        expect(dec.decode(first.bytes)).toBe('m0');
        first.release();
        const got: string[] = [];
        const seqs: number[] = [];
        const ends: unknown[] = [];
        ch.listen(
          (m) => {
            got.push(dec.decode(m.bytes));
            seqs.push(m.seq);
            m.release();
          },
          (err) => ends.push(err),
        );
        expect(codeOf(await rejection(ch.receive(LONG)))).toBe('ERR_MUX_INVALID_ARG');
        let thrown: unknown;
        try {
          ch.listen(
            () => {},
            () => {},
          );
        } catch (err) {
          thrown = err;
        }
        expect(codeOf(thrown)).toBe('ERR_MUX_INVALID_ARG');
        for (let i = N / 2; i < N; i++) await ch.send(enc.encode(`m${i}`), LONG);
        await expect.poll(() => got.length, { timeout: 60_000 }).toBe(N - 1);
        expect(got).toEqual(Array.from({ length: N - 1 }, (_, i) => `m${i + 1}`));
        expect(seqs).toEqual(Array.from({ length: N - 1 }, (_, i) => i + 1));
        expect(ends).toEqual([]);
        await ch.close(LONG);
        expect(ends.length).toBe(1);
        expect(codeOf(ends[0])).toBe('ERR_MUX_CLOSED');
        // A peer-opened channel: its one message, then the end at the peer's close.
        const opened = new Promise<Channel>((resolve) => conn.once('channel', resolve));
        await conn.openChannel('reverse:1').send(new Uint8Array(0));
        const rc = await opened;
        const ended = new Promise<unknown>((resolve) => {
          const msgs: string[] = [];
          rc.listen(
            (m) => {
              msgs.push(dec.decode(m.bytes));
              m.release();
            },
            (err) => resolve({ msgs, code: codeOf(err) }),
          );
        });
        expect(await ended).toEqual({
          msgs: [`reply ${rc.name.slice(1)}`],
          code: 'ERR_MUX_CLOSED',
        });
        await conn.close(LONG);
        expect(ends.length).toBe(1);
      });

      it('messages_from_1_byte_to_16_MiB_arrive_intact_and_in_order_per_channel', async () => {
        const seed = Number(process.env.MUX_CONTRACT_SEED ?? 20261203);
        const { transport, alloc } = withReceiveAllocator(target);
        const conn = await transport.connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        const r = prng(seed);
        const CHANNELS = 3;
        const PER = 10;
        const sizes = sizeMix(seed, CHANNELS * PER, 16 * MiB);
        const work = Array.from({ length: CHANNELS }, (_, c) => ({
          ch: conn.openChannel('echo'),
          sizes: sizes.slice(c * PER, (c + 1) * PER),
        }));
        await Promise.all(
          work.map(async ({ ch, sizes: mine }) => {
            const sent: Uint8Array[] = [];
            const sending = (async () => {
              for (const [i, n] of mine.entries()) {
                const key = ch.id * 1000 + i;
                const expected = fillPattern(new Uint8Array(n), key);
                sent.push(expected);
                // Some messages as gathered parts of blocks, slices and bytes.
                if (n >= 3 && r() < 0.5) {
                  const a = Math.floor(n / 3);
                  const block = alloc.alloc(n - a);
                  block.bytes.set(expected.subarray(a));
                  const cut = Math.floor((n - a) / 2);
                  const parts: MessagePart[] = [
                    expected.subarray(0, a),
                    block.slice(0, cut),
                    block.slice(cut),
                  ];
                  await ch.send(parts, LONG);
                  block.release();
                } else if (r() < 0.5) {
                  const block = alloc.alloc(n);
                  block.bytes.set(expected);
                  await ch.send(block, { ...LONG, transfer: true });
                } else {
                  await ch.send(expected, LONG);
                }
              }
            })();
            for (let i = 0; i < mine.length; i++) {
              const m = await ch.receive(LONG);
              expect(m.seq).toBe(i);
              expect(m.length).toBe(mine[i]);
              // Sends run ahead of receives, so the expected bytes exist by now.
              expect(Buffer.compare(m.bytes, sent[i] as Uint8Array)).toBe(0);
              m.release();
            }
            await sending;
            await ch.close(LONG);
          }),
        );
        await expect.poll(() => conn.stats().sendWindowBytes, { timeout: 60_000 }).toBe(0);
        await conn.close(LONG);
        expect(alloc.leakReport().blocks).toEqual([]);
      });

      it('the_handshake_rejects_a_wrong_secret_with_ERR_MUX_AUTH_on_both_sides', async () => {
        const err = await rejection(
          target.transport({}).connect({
            port: peer.port,
            secret: 'not the secret the peer holds, 32+ bytes',
          }),
        );
        expect(codeOf(err)).toBe('ERR_MUX_AUTH');
        await expect.poll(async () => (await peer.stats()).rejects).toContain('ERR_MUX_AUTH');
      });

      it('the_handshake_rejects_another_protocol_version_with_ERR_MUX_VERSION', async () => {
        const err = await rejection(
          target.transport({ protocolVersion: 99 }).connect({ port: peer.port, secret: SECRET }),
        );
        expect(codeOf(err)).toBe('ERR_MUX_VERSION');
        await expect.poll(async () => (await peer.stats()).rejects).toContain('ERR_MUX_VERSION');
      });

      it('receive_and_connect_honour_deadlines_and_abort_signals', async () => {
        const conn = await connect();
        const ch = conn.openChannel('hold');
        expect(codeOf(await rejection(ch.receive({ timeoutMs: 20 })))).toBe('ERR_MUX_DEADLINE');
        const pre = new AbortController();
        pre.abort(new Error('not wanted'));
        expect(codeOf(await rejection(ch.receive({ signal: pre.signal })))).toBe('ERR_MUX_ABORTED');
        const later = new AbortController();
        const pending = ch.receive({ ...LONG, signal: later.signal });
        const reason = new Error('changed my mind');
        later.abort(reason);
        const err = await rejection(pending);
        expect(codeOf(err)).toBe('ERR_MUX_ABORTED');
        expect((err as Error).cause).toBe(reason);
        const cerr = await rejection(
          target.transport({}).connect({ port: peer.port, secret: SECRET, signal: pre.signal }),
        );
        expect(codeOf(cerr)).toBe('ERR_MUX_ABORTED');
        // The channel still works after its waits ended.
        await ch.send(new Uint8Array(4));
        await conn.close(LONG);
      });

      it('close_is_graceful_idempotent_and_releases_every_block', async () => {
        const { transport, alloc } = withReceiveAllocator(target);
        const conn = await transport.connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        const ch = conn.openChannel('echo');
        const big = 1 * MiB; // spans socket reads: assembled in allocator blocks
        for (let i = 0; i < 6; i++) await ch.send(fillPattern(new Uint8Array(big), i), LONG);
        const kept: InboundMessage = await ch.receive(LONG);
        // Wait until the rest has arrived and sits unreceived in the channel's queue.
        await expect.poll(() => ch.stats().queuedMessages, { timeout: 60_000 }).toBe(5);
        const closes = [conn.close(LONG), conn.close(LONG)];
        await Promise.all(closes);
        await conn.close(LONG);
        expect(conn.state).toBe('closed');
        expect(ch.state).toBe('closed');
        // What the application still holds stays valid until it releases it.
        expect(Buffer.compare(kept.bytes, fillPattern(new Uint8Array(big), 0))).toBe(0);
        kept.release();
        expect(alloc.leakReport().blocks).toEqual([]);
        // Calls after close: typed errors, and a transferred block is still released.
        expect(() => conn.openChannel('echo')).toThrow(
          expect.objectContaining({ code: 'ERR_MUX_CLOSED' }),
        );
        const block = alloc.alloc(16);
        const err = await rejection(ch.send(block, { transfer: true }));
        expect(codeOf(err)).toBe('ERR_MUX_CLOSED');
        expect(block.released).toBe(true);
        expect(alloc.leakReport().blocks).toEqual([]);
      });

      it('a_closed_channel_ends_the_peers_receives_after_every_message_before_it', async () => {
        const conn = await connect();
        const ch = conn.openChannel('echo');
        for (let i = 0; i < 100; i++) await ch.send(new Uint8Array([i]));
        for (let i = 0; i < 100; i++) {
          const m = await ch.receive(LONG);
          expect(m.bytes[0]).toBe(i);
          m.release();
        }
        await ch.close(LONG);
        expect(ch.state).toBe('closed');
        await ch.close(LONG); // idempotent
        expect(codeOf(await rejection(ch.send(new Uint8Array(1))))).toBe('ERR_MUX_CLOSED');
        expect(codeOf(await rejection(ch.receive()))).toBe('ERR_MUX_CLOSED');
        await conn.close(LONG);
      });
    });

    describe('backpressure', () => {
      const WINDOW = 1 * MiB;
      let peer: ContractPeer;
      beforeAll(async () => {
        peer = await spawnContractPeer(target.peerScript, SECRET, {
          windowBytes: WINDOW,
          maxMessageBytes: 256 * 1024,
        });
      });
      afterAll(async () => {
        await peer?.kill();
      });

      it('close_gives_up_sends_still_waiting_at_its_deadline_or_signal', async () => {
        const conn = await target.transport({}).connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        const ch = conn.openChannel('hold');
        const msg = new Uint8Array(128 * 1024);
        // 8 × 128 KiB fills the 1 MiB window (headers count too): some of these wait.
        const sends = Array.from({ length: 10 }, () =>
          rejection(ch.send(msg, LONG)).catch(() => undefined),
        );
        await expect.poll(() => conn.stats().sendStalls, { timeout: 60_000 }).toBeGreaterThan(0);
        expect(codeOf(await rejection(ch.close({ timeoutMs: 200 })))).toBe('ERR_MUX_DEADLINE');
        expect(ch.state).toBe('closed');
        const outcomes = await Promise.all(sends);
        const gaveUp = outcomes.filter((e) => codeOf(e) === 'ERR_MUX_CLOSED').length;
        expect(gaveUp).toBeGreaterThan(0);
        // Nothing of a given-up send reached the peer.
        await expect
          .poll(async () => (await peer.stats()).received, { timeout: 60_000 })
          .toBe(10 - gaveUp);
        // The connection's close honours its signal too.
        const ch2 = conn.openChannel('hold');
        const blocked = rejection(ch2.send(new Uint8Array(128 * 1024), LONG));
        const ac = new AbortController();
        const closing = rejection(conn.close({ ...LONG, signal: ac.signal }));
        ac.abort(new Error('enough'));
        expect(codeOf(await closing)).toBe('ERR_MUX_ABORTED');
        expect(conn.state).toBe('failed');
        expect(codeOf(await blocked)).toBe('ERR_MUX_ABORTED');
        await expect
          .poll(async () => (await peer.stats()).connections, { timeout: 60_000 })
          .toBe(0);
      });

      it('a_slow_receiver_stops_the_sender_with_bounded_buffered_bytes', async () => {
        const conn = await target.transport({}).connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        const ch = conn.openChannel('hold');
        const msg = new Uint8Array(64 * 1024);
        const before = (await peer.stats()).received;
        const tooBig = await rejection(ch.send(new Uint8Array(256 * 1024 + 1)));
        expect(codeOf(tooBig)).toBe('ERR_MUX_TOO_LARGE');
        let sent = 0;
        let stalled: unknown;
        // The peer holds every message: the window fills and the next send cannot go.
        for (let i = 0; i < 1000 && stalled === undefined; i++) {
          try {
            await ch.send(msg, { timeoutMs: 300 });
            sent++;
          } catch (err) {
            stalled = err;
          }
        }
        expect(codeOf(stalled)).toBe('ERR_MUX_DEADLINE');
        expect(sent).toBeGreaterThan(0);
        expect(sent * (msg.length + 16)).toBeLessThanOrEqual(WINDOW);
        expect(conn.stats().sendWindowBytes).toBeLessThanOrEqual(WINDOW);
        expect(conn.stats().sendStalls).toBeGreaterThan(0);
        const held = await peer.stats();
        expect(held.held).toBe(sent);
        expect(held.maxReceiveHeldBytes).toBeLessThanOrEqual(WINDOW + 16);
        // A waiting send ends with its signal.
        const ac = new AbortController();
        const waiting = ch.send(msg, { ...LONG, signal: ac.signal });
        ac.abort(new Error('stop'));
        expect(codeOf(await rejection(waiting))).toBe('ERR_MUX_ABORTED');
        // The receiver catches up: waiting sends go.
        const more = Array.from({ length: 32 }, () => ch.send(msg, LONG));
        await peer.release();
        await Promise.all(more);
        await expect
          .poll(async () => (await peer.stats()).received, { timeout: 60_000 })
          .toBe(before + sent + 32);
        const after = await peer.stats();
        expect(after.maxReceiveHeldBytes).toBeLessThanOrEqual(WINDOW + 16);
        await conn.close(LONG);
      });
    });

    describe('peer failure', () => {
      const opts = { heartbeatIntervalMs: 100, peerTimeoutMs: 1_500 };
      // Generous: the machine is shared; detection itself is bounded by peerTimeoutMs.
      const BOUND = opts.peerTimeoutMs + 20_000;

      async function failingChannels(peer: ContractPeer, n: number) {
        const conn = await target.transport(opts).connect({ port: peer.port, secret: SECRET });
        cleanups.push(() => conn.destroy());
        const channels = Array.from({ length: n }, () => conn.openChannel('hold'));
        await Promise.all(channels.map((ch) => ch.send(new Uint8Array(8), LONG)));
        await expect.poll(async () => (await peer.stats()).held, { timeout: 60_000 }).toBe(n);
        const receives = channels.map((ch) => rejection(ch.receive({ timeoutMs: BOUND * 2 })));
        return { conn, channels, receives };
      }

      it('a_SIGKILLed_peer_fails_every_channel_with_a_typed_error_within_the_deadline', async () => {
        const peer = await spawnContractPeer(target.peerScript, SECRET, opts);
        cleanups.push(() => peer.kill());
        const { conn, channels, receives } = await failingChannels(peer, 1000);
        // A listening channel hears the same failure at its end.
        const listening = conn.openChannel('echo');
        const heard = new Promise<unknown>((resolve) =>
          listening.listen((m) => m.release(), resolve),
        );
        const started = Date.now();
        peer.signal('SIGKILL');
        const errors = await Promise.all(receives);
        expect(FAILURE_CODES).toContain(codeOf(await heard));
        expect(Date.now() - started).toBeLessThan(BOUND);
        for (const e of errors) expect(FAILURE_CODES).toContain(codeOf(e));
        expect(conn.state).toBe('failed');
        expect(FAILURE_CODES).toContain(codeOf(conn.error));
        for (const ch of channels) expect(ch.state).toBe('failed');
        expect(FAILURE_CODES).toContain(
          codeOf(await rejection((channels[0] as Channel).send(new Uint8Array(1)))),
        );
        await conn.close(LONG); // nothing left to close: resolves
      });

      it('heartbeats_detect_a_stopped_peer_and_a_handshake_it_cannot_answer_hits_its_deadline', async () => {
        const peer = await spawnContractPeer(target.peerScript, SECRET, opts);
        cleanups.push(() => peer.kill());
        const { conn, receives } = await failingChannels(peer, 100);
        const started = Date.now();
        peer.signal('SIGSTOP');
        const errors = await Promise.all(receives);
        expect(Date.now() - started).toBeLessThan(BOUND);
        for (const e of errors) expect(codeOf(e)).toBe('ERR_MUX_PEER_TIMEOUT');
        expect(conn.state).toBe('failed');
        // The stopped peer's kernel accepts, but nobody answers the handshake.
        const err = await rejection(
          target.transport(opts).connect({ port: peer.port, secret: SECRET, timeoutMs: 300 }),
        );
        expect(codeOf(err)).toBe('ERR_MUX_DEADLINE');
        peer.signal('SIGCONT');
      });
    });
  });
}
