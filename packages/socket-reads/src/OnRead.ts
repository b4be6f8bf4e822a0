/**
 * What `net.connect`'s `onread` takes, and `adoptAccepted` too: each read lands in
 * `buffer[0, n)` and `callback(n, buffer)` runs before the next read reuses it; returning
 * false pauses the socket (`resume()` goes on).
 */
export interface OnRead {
  buffer: Uint8Array;
  callback: (n: number, buf: Uint8Array) => boolean;
}
