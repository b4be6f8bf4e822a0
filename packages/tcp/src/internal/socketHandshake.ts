import type { Socket } from 'node:net';
import {
  HANDSHAKE_MESSAGE_BYTES,
  type Handshake,
  MuxAbortError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxHandshakeError,
} from '@rdmajs/mux';

/**
 * Runs a Handshake over a socket: reads fixed-size messages (nothing else is buffered before
 * the handshake is done), writes the replies. Resolves with any bytes that followed the last
 * handshake message (the first frames). On failure the rejection reason is sent, the socket
 * destroyed, and the promise rejects with a typed error.
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
      socket.off('close', onClose);
      socket.off('end', onClose);
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
          fill += take;
          off += take;
          if (fill < HANDSHAKE_MESSAGE_BYTES) return;
          fill = 0;
          const reply = hs.receive(buf);
          if (reply !== undefined) socket.write(reply);
          if (hs.state === 'done') {
            cleanup();
            // Pause so no frame is lost between this listener and the connection's.
            socket.pause();
            resolve(chunk.subarray(off));
            return;
          }
        }
      } catch (err) {
        fail(
          err instanceof MuxError ? err : new MuxHandshakeError('ERR_MUX_HANDSHAKE', String(err)),
        );
      }
    };
    const onClose = () =>
      fail(
        new MuxConnectionError(
          'ERR_MUX_CONNECTION_LOST',
          `handshake (${hs.role}): the peer closed the connection (state ${hs.state})`,
        ),
      );
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
    socket.on('close', onClose);
    // allowHalfOpen sockets emit no 'close' on the peer's FIN: a peer that ended (or a
    // server that dropped us at once) must not look like a deadline.
    socket.on('end', onClose);
    socket.on('error', onError);
    if (signal !== undefined) {
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
    }
    if (hs.role === 'client') socket.write(hs.start());
  });
}
