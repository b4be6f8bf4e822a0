// A copy of @rdmajs/verbs' soft-link helper (src/internal/soft/link/adoptAccepted.ts), made
// generic (any `onread`, socket options): tcp must not import verbs, and no lower package
// both could share holds node:net plumbing yet. Keep the two in step until it moves there.
//
// An accepted connection that reads into a buffer of ours (`onread`), as a dialed one does
// with `net.connect({ onread })`. net.Server has no option for it, and Node's default reads
// allocate a new buffer per read. Node's Socket takes an existing handle with `onread`; the
// accepted Socket is left without it. The server must accept paused (`pauseOnConnect`):
// nothing was read yet.
import { Socket, type SocketConstructorOpts } from 'node:net';

/** The fields of node:net's Socket this reaches (stable since Node 12: `onread`'s release). */
interface SocketInternals {
  _handle: unknown;
  /** the server that counted it (its `_connections` drop when the socket is destroyed) */
  _server: unknown;
  server: unknown;
}

/** What `net.connect`'s `onread` takes: each read lands in `buffer`; false pauses. */
export interface OnRead {
  buffer: Uint8Array;
  callback: (n: number, buf: Uint8Array) => boolean;
}

/**
 * The connection `raw` (accepted paused) as a Socket reading per `onread`. Undefined when
 * `raw` has no handle (already closed; it is destroyed).
 */
export function adoptAccepted(
  raw: Socket,
  onread: OnRead,
  options: Pick<SocketConstructorOpts, 'allowHalfOpen'> = {},
): Socket | undefined {
  const r = raw as unknown as SocketInternals;
  const handle = r._handle;
  if (handle === null || handle === undefined || raw.destroyed) {
    // Closed already, or a Node whose Socket keeps its handle elsewhere: never leave the fd
    // (and the server's connection count) behind.
    raw.destroy();
    return undefined;
  }
  const server = r._server;
  r._handle = null;
  // The server counts the connection once: the adopted socket releases it when it closes.
  r._server = null;
  raw.destroy(); // without its handle: closes nothing
  const sock = new Socket({
    ...options,
    handle,
    readable: true,
    writable: true,
    onread,
  } as SocketConstructorOpts);
  const s = sock as unknown as SocketInternals;
  s._server = server;
  s.server = server;
  return sock;
}
