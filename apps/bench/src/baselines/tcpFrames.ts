import type { TcpTransportOptions } from '@rdmajs/tcp';

/**
 * The bench's TCP side sends frames in clear: the paper's baseline is kernel TCP, and RDMA's
 * data path is not encrypted either (it relies on the fabric), so rows compare transport with
 * transport. TcpTransport's default seals every frame (AES-256-GCM); that cost is protection,
 * not transport, and counted against TCP it would flatter RDMA.
 */
export const TCP_BASELINE_OPTIONS = {
  frameProtection: 'none',
} as const satisfies TcpTransportOptions;

/** The same for shards the bench starts (`rdmajs-ps-server`). */
export const TCP_BASELINE_SHARD_ARGS: readonly string[] = ['--tcp-frame-protection', 'none'];
