import type { Socket } from 'node:net';
import {
  MuxAbortError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxHandshakeError,
} from './errors.js';
import { HANDSHAKE_MESSAGE_BYTES, type Handshake } from './Handshake.js';

/**
 * Runs a Handshake over a socket, for every transport: reads fixed-size messages (nothing
 * else is buffered before the peer is authenticated), writes the replies, and resolves with
 * the bytes that followed the last handshake message. Fails as soon as it can tell: the
 * first bytes of a message are not the magic (no rdmajs peer), the peer rejects or ends, the
 * deadline passes or the signal aborts. On failure the rejection (if any) goes out, the
 * socket is destroyed and the promise rejects with a typed error.
 */
export function socketHandshake(
  socket: Socket,
  hs: Handshake,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    const buf = Buffer.alloc(HANDSHAKE_MESSAGE_BYTES);
    let fill = 0;
    let settled = false;
    const cleanup = () => {
      settled = true;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.off('error', onError);
      signal?.removeEventListener('abort', onAbort);
    };
    const fail = (err: Error) => {
      if (settled) return;
      cleanup();
      // The peer may reset the socket while our rejection drains: nobody listens any more.
      socket.on('error', () => {});
      const r = hs.rejection;
      if (r !== undefined && !socket.destroyed) socket.end(r);
      // Give the rejection a moment to leave, then make sure the socket goes.
      setTimeout(() => socket.destroy(), 100).unref();
      if (r === undefined) socket.destroy();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      let off = 0;
      try {
        while (off < chunk.length && !settled) {
          const take = Math.min(HANDSHAKE_MESSAGE_BYTES - fill, chunk.length - off);
          chunk.copy(buf, fill, off, off + take);
          const before = fill;
          fill += take;
          off += take;
          if (before < 4) hs.checkPrefix(buf, fill);
          if (fill < HANDSHAKE_MESSAGE_BYTES) return;
          fill = 0;
          const reply = hs.receive(buf);
          if (reply !== undefined) socket.write(reply);
          if (hs.state === 'done') {
            cleanup();
            // Paused so no byte is lost between this listener and the connection's.
            socket.pause();
            resolve(Uint8Array.prototype.slice.call(chunk.subarray(off)));
            return;
          }
        }
      } catch (err) {
        fail(
          err instanceof MuxError ? err : new MuxHandshakeError('ERR_MUX_HANDSHAKE', String(err)),
        );
      }
    };
    const lost = (how: string) =>
      new MuxConnectionError(
        'ERR_MUX_CONNECTION_LOST',
        `handshake (${hs.role}): the peer ${how} (state ${hs.state}${fill > 0 ? `, ${fill} bytes of a message` : ''})`,
      );
    // Sockets are half-open: a peer that ends (as a non-rdmajs server may after its own
    // error reply) never closes by itself, so its end fails the handshake at once.
    const onEnd = () => fail(lost('ended the connection'));
    const onClose = () => fail(lost('closed the connection'));
    // A typed error is ours (a listener dropping or timing out the socket): kept as is.
    const onError = (err: Error) =>
      fail(
        err instanceof MuxError
          ? err
          : new MuxConnectionError(
              'ERR_MUX_CONNECTION_LOST',
              `handshake (${hs.role}): ${err.message}`,
              err,
            ),
      );
    const onAbort = () => fail(new MuxAbortError(`handshake (${hs.role})`, signal?.reason));
    const timer = setTimeout(
      () => fail(new MuxDeadlineError(`handshake (${hs.role})`, timeoutMs)),
      timeoutMs,
    );
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('close', onClose);
    socket.on('error', onError);
    if (signal !== undefined) {
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
    }
    if (hs.role === 'client') socket.write(hs.start());
  });
}
