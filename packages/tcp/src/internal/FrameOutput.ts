/**
 * Where a TcpConnection's frames go: the socket itself (frames in clear), or a SealedWriter
 * in front of it. TcpConnection corks before it writes and uncorks once per tick.
 */
export interface FrameOutput {
  cork(): void;
  uncork(): void;
  /** `cb` runs once the socket has taken this chunk (with an error if it never will). */
  write(chunk: Uint8Array, cb?: (err?: Error | null) => void): void;
  /** Bytes written and not yet taken by the kernel. */
  readonly writableLength: number;
  /** Writes what is queued, then ends the socket. */
  end(): void;
}
