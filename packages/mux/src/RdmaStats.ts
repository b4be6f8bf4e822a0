import type { ConnectionStats } from './Stats.js';

/** Counters of one RdmaConnection: the contract's, plus what the RDMA path does. */
export interface RdmaConnectionStats extends ConnectionStats {
  /** Messages sent by SEND (eager) and by rendezvous READ, and received each way. */
  readonly eagerSent: number;
  readonly rendezvousSent: number;
  readonly eagerReceived: number;
  readonly rendezvousReceived: number;
  /** Times the head of a QP's queue had to wait for a receive credit from the peer. */
  readonly creditStalls: number;
  /** Sends that had to wait for the send window (same as `sendStalls`). */
  readonly windowStalls: number;
  /** Explicit credit updates sent (credits that found no message to ride on). */
  readonly creditUpdates: number;
  /** Eager messages copied out of their receive buffer because buffers ran low. */
  readonly receiveCopies: number;
  /** Queue pairs carrying this connection's channels. */
  readonly qps: number;
  /** Send work requests posted and not yet reaped, over every QP. */
  readonly outstandingWrs: number;
  /** Work completions with RNR_RETRY_EXC_ERR: 0 while credits are obeyed. */
  readonly rnrCount: number;
  /** postSend calls (each posts a batch of work requests). */
  readonly posts: number;
  /**
   * Retries of receive reposts the SRQ refused for now (a peer process stopped while holding
   * its lock): those buffers' credits go to the peer only once a retry posts them.
   */
  readonly repostRetries: number;
  /** One-sided `read()` calls posted, and the READs (list entries) they carried. */
  readonly reads: number;
  readonly readItems: number;
  /**
   * 0 or 1: the read QP went to error (a READ the peer refused, or a read abandoned at its
   * deadline or abort). From then on `supportsRead` is false and reads on this connection
   * fail with ERR_MUX_READ_FAILED; a new connection reads again.
   */
  readonly readQpFailures: number;
  /**
   * Receive credits leased to the peer from the transport's shared receive pool (its
   * `recvCredits` when idle, up to `recvBufferCount` while busy; 0 once closed).
   */
  readonly recvLease: number;
  /** Credits the peer leases this side (what this side may have in its buffers at once). */
  readonly sendLease: number;
  /** `adaptive`: the transport's poll loop polls this CQ now (else its event is armed). */
  readonly polling: boolean;
  /** `adaptive`: poll-loop turns that polled this CQ, and receives they reaped (no wake-up). */
  readonly pollTurns: number;
  readonly pollCatches: number;
}
