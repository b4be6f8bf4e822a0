import type { Endpoint, SendWr, Sge } from '@rdmajs/verbs';

/** IPC messages between the bench and its echo peer (a real child process). */
export type PeerRequest =
  | { op: 'tcp-listen'; size: number; throughputBytes?: number }
  | { op: 'cpu' }
  | { op: 'verbs-setup'; provider: 'soft' | 'ibverbs'; bytes: number; link?: 'tcp' }
  | {
      op: 'verbs-run';
      mode: 'send' | 'write';
      size: number;
      iterations: number;
      /** Round trips before the peer starts counting its CPU (the caller's warm-up). */
      warmup: number;
      endpoint: Endpoint;
      addr: number;
      rkey: number;
      /** Event-driven: wait with `await cq.waitForCompletion(wait)` instead of busy-polling. */
      wait?: WaitMode;
      /** Event-driven from the CQ's 'completion' event (poll, requestNotify): no promise per wait. */
      listener?: boolean;
    }
  | { op: 'verbs-sink'; endpoint: Endpoint }
  | { op: 'exit' };

/**
 * The one WR each side of a verbs ping-pong reposts: unsignaled (completions are reaped by
 * SIGNAL_EVERY elsewhere), inline when small, SEND or an RDMA WRITE into the peer's buffer.
 */
export function pingPongWr(
  mode: 'send' | 'write',
  sge: Sge,
  remote: { addr: number; rkey: number },
): SendWr {
  const inline = sge.length <= 64;
  return mode === 'send'
    ? { wrId: 0, opcode: 'SEND', signaled: false, inline, sgList: [sge] }
    : {
        wrId: 0,
        opcode: 'RDMA_WRITE',
        signaled: false,
        inline,
        sgList: [sge],
        remoteAddr: remote.addr,
        rkey: remote.rkey,
      };
}

export interface VerbsSetup {
  endpoint: Endpoint;
  addr: number;
  rkey: number;
}

/** How an event-driven side waits: `spinUs` absent is the library's default spin. */
export interface WaitMode {
  spinUs?: number;
}
