import type { Endpoint } from '@rdmajs/verbs';

/** IPC messages between the bench and its echo peer (a real child process). */
export type PeerRequest =
  | { op: 'tcp-listen'; size: number; throughputBytes?: number }
  | { op: 'cpu' }
  | { op: 'verbs-setup'; provider: 'soft' | 'ibverbs'; bytes: number }
  | {
      op: 'verbs-run';
      mode: 'send' | 'write';
      size: number;
      iterations: number;
      endpoint: Endpoint;
      addr: number;
      rkey: number;
    }
  | { op: 'verbs-sink'; endpoint: Endpoint }
  | { op: 'exit' };

export interface VerbsSetup {
  endpoint: Endpoint;
  addr: number;
  rkey: number;
}
