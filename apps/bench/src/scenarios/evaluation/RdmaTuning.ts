import type { PollPolicy, RdmaTransportOptions } from '@rdmajs/mux';

/**
 * The evaluation's RDMA knobs (`pnpm bench --rdma-*`), applied alike to the client's
 * RdmaTransport and to every shard's (as `rdmajs-ps-server` flags). Unset: mux's defaults.
 */
export interface RdmaTuning {
  pollPolicy?: PollPolicy;
  qpPoolSize?: number;
  eagerThreshold?: number;
  recvBufferCount?: number;
  windowBytes?: number;
  /** Registered memory of each RdmaTransport (client and every shard). */
  maxRegisteredBytes?: number;
}

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
  return args;
}

/** The client's RdmaTransport options for the same tuning. */
export function clientOptionsOf(t: RdmaTuning): RdmaTransportOptions {
  return {
    ...(t.pollPolicy === undefined ? {} : { pollPolicy: t.pollPolicy }),
    ...(t.qpPoolSize === undefined ? {} : { qpPoolSize: t.qpPoolSize }),
    ...(t.eagerThreshold === undefined ? {} : { eagerThreshold: t.eagerThreshold }),
    ...(t.recvBufferCount === undefined ? {} : { recvBufferCount: t.recvBufferCount }),
    ...(t.windowBytes === undefined ? {} : { windowBytes: t.windowBytes }),
    ...(t.maxRegisteredBytes === undefined ? {} : { maxRegisteredBytes: t.maxRegisteredBytes }),
  };
}
