// A socket as the link's Outbox sees it (the fields it reads before a send of its own), for
// tests that set what node's stream holds without a connection.

export interface FakeSocket {
  writableLength: number;
  writableCorked: number;
  connecting: boolean;
  destroyed: boolean;
  writable: boolean;
  _handle: { fd: number };
  write(b: Uint8Array): boolean;
}

/** Descriptor 99, open and writable; `write` sees what goes through the stream. */
export function fakeSocket(
  writableLength = 0,
  write: (b: Uint8Array) => void = () => {},
): FakeSocket {
  return {
    writableLength,
    writableCorked: 0,
    connecting: false,
    destroyed: false,
    writable: true,
    _handle: { fd: 99 },
    write(b: Uint8Array) {
      write(b);
      return true;
    },
  };
}
