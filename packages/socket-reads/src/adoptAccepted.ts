// An accepted connection that reads into a buffer of ours (`onread`), as a dialed one does
// with `net.connect({ onread })`. net.Server has no option for it, and Node's default reads
// allocate a new buffer per read (fresh pages the kernel faults in and zeroes, external
// memory that drives full GCs) and emit it through the stream machinery as 'data'. Node's
// Socket takes an existing handle with `onread` (what `connect` does for a dialed one); the
// accepted Socket is left without it, so its handle moves to a new Socket that has it. The
// server must accept paused (`pauseOnConnect`): nothing was read yet.
import { Socket, type SocketConstructorOpts } from 'node:net';
import type { OnRead } from './OnRead.js';

/** The fields of node:net's Socket this reaches (stable since Node 12: `onread`'s release). */
interface SocketInternals {
  _handle: unknown;
  /** the server that counted it (its `_connections` drop when the socket is destroyed) */
  _server: unknown;
  server: unknown;
}

/** Options of the adopted Socket (those of the server's sockets a caller may need again). */
export type AdoptOptions = Pick<SocketConstructorOpts, 'allowHalfOpen'>;

/**
 * The connection `raw` (accepted paused) as a Socket reading per `onread`. Undefined when
 * `raw` has no handle (already closed; it is destroyed).
 */
export function adoptAccepted(
  raw: Socket,
  onread: OnRead,
  options: AdoptOptions = {},
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
