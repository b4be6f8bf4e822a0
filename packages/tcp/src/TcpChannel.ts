import { ChannelCore, type OutboundMessage, type SendOptions } from '@rdmajs/mux';
import type { TcpConnection } from './TcpConnection.js';

/**
 * A channel of a TcpConnection: mux's ChannelCore (receive queue bounded by the receive
 * window, waits with deadlines and signals, close, failure) with sends framed on the socket.
 */
export class TcpChannel extends ChannelCore<TcpConnection> {
  send(message: OutboundMessage, options?: SendOptions): Promise<void> {
    return this.connection.sendOn(this, message, options);
  }

  protected closed(): void {
    this.connection.channelClosed(this);
  }
}
