// An accepted connection that reads into a buffer of ours (`onread`), as a dialed one does
// (LinkClient). net.Server has no option for it, and Node's default reads allocate a new
// buffer per read: on the link's target that is every request, and every 64 KiB of a large
// WRITE, whose fresh pages the kernel faults in and zeroes (glibc gives them back between
// reads), plus the stream machinery of a 'data' event. Node's Socket takes an existing
// handle with `onread` (what `connect` does for a dialed one); the accepted Socket is left
// without it. The server must accept paused (`pauseOnConnect`): nothing was read yet.
import { Socket } from 'node:net';

/** The fields of node:net's Socket this reaches (stable since Node 12: `onread`'s release). */
interface SocketInternals {
  _handle: unknown;
  /** the server that counted it (its `_connections` drop when the socket is destroyed) */
  _server: unknown;
  server: unknown;
}

/**
 * The connection `raw` (accepted paused) as a Socket reading into `buffer`: `callback(n)`
 * gets each read's bytes at `buffer[0, n)` and returns false to stop reading (the socket is
 * paused; `resume()` goes on). Undefined when `raw` has no handle (already closed).
 */
export function adoptAccepted(
  raw: Socket,
  buffer: Buffer,
  callback: (n: number) => boolean,
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
    handle,
    readable: true,
    writable: true,
    onread: { buffer, callback: (n: number) => callback(n) },
  } as ConstructorParameters<typeof Socket>[0]);
  const s = sock as unknown as SocketInternals;
  s._server = server;
  s.server = server;
  return sock;
}
