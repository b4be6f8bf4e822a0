import type { RdmaTransportOptions } from '@rdmajs/mux';

/**
 * The evaluation's RDMA knobs (`pnpm bench --rdma-*`), applied alike to the client's
 * RdmaTransport and to every shard's (as `rdmajs-ps-server` flags). Unset: mux's defaults.
 */
export type RdmaTuning = Pick<
  RdmaTransportOptions,
  | 'pollPolicy'
  | 'qpPoolSize'
  | 'eagerThreshold'
  | 'recvBufferCount'
  | 'windowBytes'
  | 'maxRegisteredBytes'
  | 'ablations'
>;

/** The `rdmajs-ps-server` flags that give a shard's RdmaTransport the same tuning. */
export function serverArgsOf(t: RdmaTuning): string[] {
  const args: string[] = [];
  if (t.pollPolicy !== undefined) args.push('--rdma-poll', t.pollPolicy);
  if (t.qpPoolSize !== undefined) args.push('--rdma-qp-pool', String(t.qpPoolSize));
  if (t.eagerThreshold !== undefined) args.push('--rdma-eager-threshold', String(t.eagerThreshold));
  if (t.recvBufferCount !== undefined) args.push('--rdma-recv-buffers', String(t.recvBufferCount));
  if (t.windowBytes !== undefined) args.push('--rdma-window-bytes', String(t.windowBytes));
  if (t.maxRegisteredBytes !== undefined)
    args.push('--rdma-max-registered', String(t.maxRegisteredBytes));
  if (t.ablations !== undefined && t.ablations.length > 0)
    args.push('--rdma-ablate', t.ablations.join(','));
  return args;
}
