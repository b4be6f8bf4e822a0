// A hand-driven peer: does the real handshake over a raw socket, then writes whatever
// frames a test wants (the hostile side of the tcp tests).
import net from 'node:net';
import {
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameType,
  HANDSHAKE_MESSAGE_BYTES,
  Handshake,
  type HandshakeLimits,
  type SessionKeys,
} from '@rdmajs/mux';
import type { FrameOutput } from '../src/internal/FrameOutput.js';
import { SealedWriter } from '../src/internal/SealedWriter.js';

export interface RawPeer {
  socket: net.Socket;
  /** The server's announced limits. */
  peerLimits: HandshakeLimits;
  /** Writes one frame (sealed in its own record when the connection is sealed). */
  frame(type: FrameType, channel: number, seq: number, payload?: Uint8Array, length?: number): void;
  /** Writes bytes as frames would go (sealed in a record of their own when sealed). */
  bytes(data: Uint8Array): void;
  /** The handshake's session keys (to forge or tamper with sealed records). */
  keys: SessionKeys;
  /** Resolves when the server closed the socket. */
  closed: Promise<void>;
}

export const RAW_LIMITS: HandshakeLimits = {
  maxFrameBytes: 1 << 20,
  windowBytes: 4 << 20,
  windowMessages: 1024,
};

/** `protection`: as the listener's `frameProtection` (default 'aead'). */
export async function rawPeer(
  port: number,
  secret: string,
  protection: 'aead' | 'none' = 'aead',
): Promise<RawPeer> {
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  const hs = new Handshake({
    role: 'client',
    secret,
    limits: RAW_LIMITS,
    transport: protection === 'aead' ? 'tcp-sealed' : 'tcp',
  });
  await new Promise<void>((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= HANDSHAKE_MESSAGE_BYTES) {
        const msg = buf.subarray(0, HANDSHAKE_MESSAGE_BYTES);
        buf = buf.subarray(HANDSHAKE_MESSAGE_BYTES);
        try {
          const reply = hs.receive(msg);
          if (reply !== undefined) socket.write(reply);
        } catch (err) {
          reject(err);
          return;
        }
        if (hs.state === 'done') {
          socket.off('data', onData);
          resolve();
          return;
        }
      }
    };
    socket.on('data', onData);
    socket.once('connect', () => socket.write(hs.start()));
    socket.once('close', () => reject(new Error('closed during the handshake')));
  });
  socket.on('data', () => {}); // drain what the server sends (pings)
  const keys = hs.sessionKeys as SessionKeys;
  const out: FrameOutput = protection === 'aead' ? new SealedWriter(socket, keys.send) : socket;
  return {
    socket,
    peerLimits: hs.peerLimits as HandshakeLimits,
    closed,
    keys,
    bytes(data) {
      out.write(data);
    },
    frame(type, channel, seq, payload, length) {
      const h = Buffer.alloc(FRAME_HEADER_BYTES);
      encodeFrameHeader(h, 0, type, channel, seq, length ?? payload?.length ?? 0);
      out.cork();
      out.write(h);
      if (payload !== undefined && payload.length > 0) out.write(payload);
      out.uncork();
    },
  };
}
