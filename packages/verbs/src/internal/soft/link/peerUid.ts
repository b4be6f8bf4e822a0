// The user id owning the other end of a loopback TCP connection, read from the kernel's
// socket table (/proc/net/tcp, tcp6): SO_PEERCRED exists only for Unix sockets. On one
// host, a link accepts only processes of its own user; authentication still follows.
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { isIPv4 } from 'node:net';

function hexPort(port: number): string {
  return port.toString(16).toUpperCase().padStart(4, '0');
}

/** An IPv4 address as /proc/net/tcp prints it: the u32 in host (little-endian) order. */
function hexV4(ip: string): string {
  return ip
    .split('.')
    .map((b) => Number(b).toString(16).toUpperCase().padStart(2, '0'))
    .reverse()
    .join('');
}

/** An IPv6 address as /proc/net/tcp6 prints it: four u32 words, each little-endian. */
function hexV6(ip: string): string | undefined {
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (v4) return `0000000000000000FFFF0000${hexV4(v4[1] as string)}`;
  if (ip === '::1') return '00000000000000000000000001000000';
  return undefined;
}

export function isLoopback(ip: string | undefined): boolean {
  if (!ip) return false;
  return ip === '::1' || /^(::ffff:)?127\./i.test(ip);
}

/** The uid of the process whose socket is the peer of `sock`, or undefined if not found. */
export function loopbackPeerUid(sock: Socket): number | undefined {
  const { remoteAddress: ra, remotePort: rp, localAddress: la, localPort: lp } = sock;
  if (!ra || !rp || !la || !lp) return undefined;
  const v4 = isIPv4(ra) && isIPv4(la);
  const peer = v4 ? hexV4(ra) : hexV6(ra);
  const self = v4 ? hexV4(la) : hexV6(la);
  if (!peer || !self) return undefined;
  const want = `${peer}:${hexPort(rp)} ${self}:${hexPort(lp)}`;
  try {
    const table = readFileSync(v4 ? '/proc/net/tcp' : '/proc/net/tcp6', 'latin1');
    for (const line of table.split('\n')) {
      const f = line.trim().split(/\s+/);
      if (`${f[1]} ${f[2]}` === want) return Number(f[7]);
    }
  } catch {
    return undefined;
  }
  return undefined;
}
