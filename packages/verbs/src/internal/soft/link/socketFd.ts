// The descriptor under a node:net Socket, for the few writes the link makes itself (one
// non-blocking syscall where node's stream would add a request object and a callback).
import type { Socket } from 'node:net';

/** The socket's descriptor, or -1 (closed, or a Node that keeps it elsewhere). */
export function socketFd(sock: Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } | null })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : -1;
}
