import type { Socket } from 'node:net';
import type { OnRead } from '@rdmajs/socket-reads';

/**
 * Every TCP socket of this package reads into this one buffer (`onread`): Node's default
 * reads allocate a fresh 64 KiB ArrayBuffer per read, whose churn of external memory drives
 * full (Mark-Compact) GCs. One buffer serves every socket of the process because each read
 * is parsed before the next read of any socket lands in it: nothing may keep a view of it
 * (payloads are copied out, partial headers and records too).
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(256 * 1024);

/**
 * Routes one socket's reads. Until `sink` is set (the handshake), each read goes out as a
 * 'data' event of a copy, which `socketHandshake` and the listener's admission read; the
 * handshake pauses the socket when done, so no byte is read before the connection's sink.
 */
export class SocketReads {
  socket: Socket | undefined;
  sink: ((chunk: Uint8Array) => void) | undefined;
  readonly onread: OnRead = {
    buffer: READ_BUFFER,
    callback: (n: number) => {
      const chunk = READ_BUFFER.subarray(0, n);
      if (this.sink !== undefined) this.sink(chunk);
      else this.socket?.emit('data', Buffer.from(chunk));
      return true;
    },
  };
}
