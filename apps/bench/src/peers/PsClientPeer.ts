import { IpcChild } from './IpcChild.js';
import { peerScriptUrl } from './peerLaunch.js';
import type {
  PsBlockRequest,
  PsBlockResult,
  PsClientPeerArgs,
  PsClientPeerRequest,
} from './psClientProtocol.js';

/** A block's calls may each take a few hundred ms on a loaded host (4 096 keys × dim 256). */
const BLOCK_TIMEOUT_MS = 120_000;
const WARMUP_TIMEOUT_MS = 600_000;

/**
 * One transport's PsClient in its own process (`ps-client-peer.ts`): the bench asks it for
 * blocks of calls and gets their latencies and the process's CPU back, one message per block.
 * A peer that fails or misses a deadline is killed; `close()` always leaves no process.
 */
export class PsClientPeer {
  private constructor(
    readonly side: PsClientPeerArgs['side'],
    readonly ipc: IpcChild<PsClientPeerRequest>,
  ) {}

  /** Starts the process and connects its client (resolves once it is connected). */
  static async spawn(args: PsClientPeerArgs): Promise<PsClientPeer> {
    const ipc = await IpcChild.fork<PsClientPeerRequest>(
      peerScriptUrl('./ps-client-peer', import.meta.url),
      [JSON.stringify(args)],
      `ps ${args.side} client peer`,
    );
    return new PsClientPeer(args.side, ipc);
  }

  get pid(): number {
    return this.ipc.pid;
  }

  /** `calls` 16-key pulls and pushes cycling through `dims`, before the first row. */
  async warmUp(calls: number, dims: readonly number[], timeoutMs = WARMUP_TIMEOUT_MS) {
    await this.ipc.request({ op: 'warmup', calls, dims: [...dims] }, timeoutMs);
  }

  /** One block of calls; its latencies (µs, empty unless `measure`) and the peer's CPU. */
  async block(req: PsBlockRequest, timeoutMs = BLOCK_TIMEOUT_MS): Promise<PsBlockResult> {
    const r = await this.ipc.request<PsBlockResult>({ op: 'block', ...req }, timeoutMs);
    const want = req.measure ? req.n : 0;
    if (
      !(r?.latenciesUs instanceof Float64Array) ||
      r.latenciesUs.length !== want ||
      !Number.isFinite(r.cpuUs) ||
      r.cpuUs < 0
    ) {
      await this.ipc.kill();
      throw new Error(`ps ${this.side} client peer: malformed block result`);
    }
    return r;
  }

  close(): Promise<void> {
    return this.ipc.close({ op: 'exit' });
  }

  /** SIGKILL (a scenario that failed does not wait for a graceful close). */
  kill(): Promise<void> {
    return this.ipc.kill();
  }
}
