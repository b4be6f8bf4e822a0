import type { SparseTableConfig } from '@rdmajs/ps-server';
import { IpcChild } from '../../peers/IpcChild.js';
import { peerScriptUrl } from '../../peers/peerLaunch.js';
import { type GcCounts, isGcCounts, type ProcessGc } from '../../stats/GcCounts.js';

const CALL_TIMEOUT_MS = 30_000;
const CLOSE_TIMEOUT_MS = 5_000;

/** IPC requests to `grpc-server.ts` (one reply each, matched by `id`). */
export type GrpcServerRequest =
  | { op: 'start'; tables: SparseTableConfig[] }
  | { op: 'cpu' }
  | { op: 'gc' }
  | { op: 'exit' };

/**
 * The gRPC parameter-store server as a forked child process (IpcChild): every IPC call has a
 * deadline, a child that misses one is killed, and the child exits with the bench.
 */
export class GrpcStoreServer {
  private constructor(
    readonly ipc: IpcChild<GrpcServerRequest>,
    readonly port: number,
  ) {}

  static async start(tables: SparseTableConfig[]): Promise<GrpcStoreServer> {
    const ipc = await IpcChild.fork<GrpcServerRequest>(
      peerScriptUrl('./grpc-server', import.meta.url),
      [],
      'grpc server',
      CALL_TIMEOUT_MS,
    );
    try {
      const r = await ipc.request<{ port: number }>({ op: 'start', tables }, CALL_TIMEOUT_MS);
      const port = r?.port;
      if (!Number.isInteger(port) || port <= 0 || port > 65_535)
        throw new Error(`grpc server: bad port ${String(port)}`);
      return new GrpcStoreServer(ipc, port);
    } catch (err) {
      await ipc.kill();
      throw err;
    }
  }

  /** The server process (its CPU and RSS are read from /proc by the evaluation). */
  get pid(): number {
    return this.ipc.pid;
  }

  /** The server process's CPU time so far, µs. */
  cpuUs(): Promise<number> {
    return this.ipc.request<number>({ op: 'cpu' }, CALL_TIMEOUT_MS);
  }

  /** The server process's GCs since it started. */
  async gcCounts(): Promise<GcCounts> {
    const gc = await this.ipc.request<unknown>({ op: 'gc' }, CALL_TIMEOUT_MS);
    if (!isGcCounts(gc)) throw new Error('grpc server: malformed gc reply');
    return gc;
  }

  /** Graceful shutdown (bounded in the child), SIGKILL if it does not exit in time. */
  close(): Promise<void> {
    return this.ipc.close({ op: 'exit' }, CLOSE_TIMEOUT_MS);
  }
}

/** Every server's GCs since it started (`grpc server 0` …; one that does not answer is left out). */
export async function grpcServersGc(servers: readonly GrpcStoreServer[]): Promise<ProcessGc[]> {
  const read = await Promise.allSettled(servers.map((s) => s.gcCounts()));
  return read.flatMap((r, i) =>
    r.status === 'fulfilled'
      ? [{ process: `grpc server ${i}`, pid: (servers[i] as GrpcStoreServer).pid, ...r.value }]
      : [],
  );
}
