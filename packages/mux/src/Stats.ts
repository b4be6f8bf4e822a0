/** Counters of one channel, since it opened. */
export interface ChannelStats {
  readonly messagesSent: number;
  readonly bytesSent: number;
  readonly messagesReceived: number;
  readonly bytesReceived: number;
  /** Received messages waiting for `receive()`, and their bytes. */
  readonly queuedMessages: number;
  readonly queuedBytes: number;
  /** Sends that had to wait for the connection's send window. */
  readonly sendStalls: number;
}

/** Counters of one connection, since it opened. */
export interface ConnectionStats {
  readonly state: string;
  readonly channels: number;
  readonly messagesSent: number;
  readonly bytesSent: number;
  readonly messagesReceived: number;
  readonly bytesReceived: number;
  /** Sends that had to wait for the send window (the peer had not released enough). */
  readonly sendStalls: number;
  /** Bytes sent and not yet released by the peer (the send window in use). */
  readonly sendWindowBytes: number;
  /** Bytes received and not yet released by the application, plus a partial frame. */
  readonly receiveHeldBytes: number;
  /** Highest `receiveHeldBytes` seen: bounded by the receive window plus one frame header. */
  readonly maxReceiveHeldBytes: number;
  /** Frames written to / read from the wire (writes are batched, so framesOut ≥ writes). */
  readonly framesOut: number;
  readonly framesIn: number;
  /** Writes handed to the kernel (batched per tick). */
  readonly writes: number;
}
