import { IpcChild } from '../../peers/IpcChild.js';
import { peerScriptUrl } from '../../peers/peerLaunch.js';
import type { Transport } from '../../report/Result.js';
import { procRssBytes, procThreadsCpuUs } from '../../stats/cpu.js';
import { gcBetween, isGcCounts, type ProcessGc } from '../../stats/GcCounts.js';
import type { LatencySummary } from '../../stats/LatencyRecorder.js';
import { sumWakeups, wakeups } from '../../stats/loopWakeups.js';
import type {
  ClientInfoReply,
  ClientProcessArgs,
  ClientProcessRequest,
  FetchRowReply,
  IncastRowReply,
} from './clientProtocol.js';
import type { IncastOptions } from './incast.js';
import type { OpenLoopOptions } from './openLoop.js';

/** Slack on top of a row's own duration before its process counts as stuck (loaded host). */
const ROW_SLACK_MS = 120_000;
const WARMUP_TIMEOUT_MS = 300_000;
const SMALL_TIMEOUT_MS = 30_000;

/** Reading a process that is gone (a shard killed and not yet restarted) counts nothing. */
function sumOver(pids: readonly number[], read: (pid: number) => number): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      sum += read(pid);
    } catch {
      // no /proc entry: the process exited
    }
  }
  return sum;
}

const finite = (x: unknown): boolean => typeof x === 'number' && Number.isFinite(x);
const safeCount = (x: unknown): boolean => Number.isSafeInteger(x) && (x as number) >= 0;
const isSummary = (s: unknown): s is LatencySummary => {
  const x = s as LatencySummary;
  return (
    typeof x === 'object' &&
    x !== null &&
    [x.p50Us, x.meanUs, x.p99Us, x.p999Us].every(finite) &&
    Array.isArray(x.cdf) &&
    x.cdf.every((c) => finite(c?.p) && finite(c?.us))
  );
};
const isCost = (r: { cpuUs: unknown; rssBytes: unknown; gc: unknown }) =>
  finite(r.cpuUs) && (r.cpuUs as number) >= 0 && safeCount(r.rssBytes) && isGcCounts(r.gc);

/** The request pools every row of a client process draws from (sent once, structured clone). */
export interface ClientPools {
  /** Fetch key batches, pulled in turn. */
  fetch: readonly BigUint64Array[];
  /** Push key batches (each pushed with a gradient of its size). */
  push: readonly BigUint64Array[];
}

/** A round's reply (the row so far) with what the servers spent over that round. */
export type Costed<T> = T & {
  /** CPU of every server process over this round, µs (add up the rounds of a row). */
  serversCpuUs: number;
  /** Resident memory of every server process at this round's end, bytes. */
  serversRssBytes: number;
  /** GCs of each server process over this round (add up the rounds of a row). */
  serversGc: ProcessGc[];
  /**
   * Event-loop wake-ups over this round (main threads' voluntary context switches) of the
   * client process and of every server together; undefined where /proc cannot say.
   */
  clientWakeups: number | undefined;
  serversWakeups: number | undefined;
};

/** Reads every server process's GCs so far (a process that cannot be read is left out). */
export type ServerGcReader = () => Promise<readonly ProcessGc[]>;

/**
 * One evaluation target's clients in their own process (`client-process.ts`, forked through
 * IpcChild): the bench sends it the workload once, then asks for rows (an open-loop fetch,
 * a closed-loop probe, an incast), in rounds, and gets one summary back per round. The client gets its
 * own GC and event loop, as a user's does; the bench never forces a GC between rows. Server
 * CPU over a round is read from /proc around the request. A process that fails, misses a
 * deadline or answers malformed is killed before the error surfaces.
 */
export class ClientProcess {
  private constructor(
    readonly transport: Transport,
    /** What differs from the full system (an ablation, or the reference row's `ref`). */
    readonly variant: string | undefined,
    readonly ipc: IpcChild<ClientProcessRequest>,
    readonly serverPids: () => readonly number[],
    readonly serverGc: ServerGcReader,
    readonly owner: boolean,
  ) {}

  /** Starts the process, connects its clients and hands it the request pools of every row. */
  static async spawn(
    args: ClientProcessArgs,
    o: {
      transport: Transport;
      variant?: string | undefined;
      serverPids: () => readonly number[];
      /** The servers' GCs (none counted when not given). */
      serverGc?: ServerGcReader;
      pools: ClientPools;
    },
  ): Promise<ClientProcess> {
    const name = `${o.transport}${o.variant === undefined ? '' : ` ${o.variant}`} client process`;
    const ipc = await IpcChild.fork<ClientProcessRequest>(
      peerScriptUrl('./client-process', import.meta.url),
      [JSON.stringify(args)],
      name,
    );
    const p = new ClientProcess(
      o.transport,
      o.variant,
      ipc,
      o.serverPids,
      o.serverGc ?? (() => Promise.resolve([])),
      true,
    );
    try {
      await ipc.request(
        { op: 'workload', fetch: [...o.pools.fetch], push: [...o.pools.push] },
        SMALL_TIMEOUT_MS,
      );
    } catch (err) {
      await ipc.kill();
      throw err;
    }
    return p;
  }

  /** The same process under another label (the reference rows measured beside an ablation). */
  as(variant: string): ClientProcess {
    return new ClientProcess(
      this.transport,
      variant,
      this.ipc,
      this.serverPids,
      this.serverGc,
      false,
    );
  }

  get pid(): number {
    return this.ipc.pid;
  }

  async warmUp(pulls: number, pushes: number): Promise<void> {
    await this.ipc.request({ op: 'warmup', pulls, pushes }, WARMUP_TIMEOUT_MS);
  }

  /** Pushes every distinct key of the fetch pool once (see client-process `fillFetchKeys`). */
  async fill(): Promise<number> {
    const keys = await this.ipc.request<number>({ op: 'fill' }, WARMUP_TIMEOUT_MS);
    return this.#check(Number.isSafeInteger(keys) && keys > 0, keys);
  }

  /** Closed-loop pulls per second with `concurrency` always in flight. */
  async capacity(concurrency: number, durationMs: number): Promise<number> {
    const rps = await this.ipc.request<number>(
      { op: 'capacity', concurrency, durationMs },
      durationMs + ROW_SLACK_MS,
    );
    return this.#check(finite(rps) && rps >= 0, rps);
  }

  /** One round of a fetch row (`fresh`: the row's first); the reply is the row so far. */
  async fetch(o: OpenLoopOptions & { fresh: boolean }): Promise<Costed<FetchRowReply>> {
    return this.#costed(
      { op: 'fetch', ...o },
      o.durationMs,
      (r: FetchRowReply) =>
        [r.latency, r.fromArrival, r.lag].every(isSummary) &&
        [r.completed, r.dropped, r.failed].every(safeCount) &&
        finite(r.seconds),
    );
  }

  /** One round of an incast row (`fresh`: the row's first); the reply is the row so far. */
  async incast(
    o: IncastOptions & { firstBurst: number; fresh: boolean },
    expectedMs: number,
  ): Promise<Costed<IncastRowReply>> {
    return this.#costed(
      { op: 'incast', ...o },
      expectedMs,
      (r: IncastRowReply) =>
        isSummary(r.latency) &&
        [r.count, r.failed].every(safeCount) &&
        finite(r.busyMs) &&
        finite(r.seconds),
    );
  }

  /** Client-side memory and RDMA resources (QPs, registered bytes) of this target. */
  async info(): Promise<ClientInfoReply> {
    const r = await this.ipc.request<ClientInfoReply>({ op: 'info' }, SMALL_TIMEOUT_MS);
    return this.#check(
      typeof r === 'object' &&
        r !== null &&
        safeCount(r.rssBytes) &&
        (r.qps === undefined || safeCount(r.qps)) &&
        (r.registeredBytes === undefined || safeCount(r.registeredBytes)) &&
        (r.receiveQueueEmptied === undefined || safeCount(r.receiveQueueEmptied)),
      r,
    );
  }

  /** Closes the clients and the process (only the owner: a relabelled view closes nothing). */
  close(): Promise<void> {
    return this.owner ? this.ipc.close({ op: 'exit' }) : Promise.resolve();
  }

  kill(): Promise<void> {
    return this.owner ? this.ipc.kill() : Promise.resolve();
  }

  async #costed<T extends { cpuUs: number; rssBytes: number; gc: unknown }>(
    req: ClientProcessRequest,
    expectedMs: number,
    valid: (r: T) => boolean,
  ): Promise<Costed<T>> {
    const gc0 = await this.serverGc();
    const servers0 = sumOver(this.serverPids(), procThreadsCpuUs);
    const wake0 = [wakeups(this.pid), sumWakeups(this.serverPids())];
    const r = await this.ipc.request<T>(req, expectedMs + ROW_SLACK_MS);
    const serversCpuUs = sumOver(this.serverPids(), procThreadsCpuUs) - servers0;
    const wake1 = [wakeups(this.pid), sumWakeups(this.serverPids())];
    const [clientWakeups, serversWakeups] = wake0.map((w0, i) => {
      const w1 = wake1[i];
      return w0 === undefined || w1 === undefined ? undefined : w1 - w0;
    });
    const serversGc = gcBetween(gc0, await this.serverGc());
    await this.#check(typeof r === 'object' && r !== null && isCost(r) && valid(r), r);
    return {
      ...r,
      serversCpuUs,
      serversRssBytes: sumOver(this.serverPids(), procRssBytes),
      serversGc,
      clientWakeups,
      serversWakeups,
    };
  }

  /** `r` if `ok`; else the process is killed, then the error thrown. */
  async #check<T>(ok: boolean, r: T): Promise<T> {
    if (ok) return r;
    await this.ipc.kill();
    throw new Error(`${this.transport} client process: malformed reply`);
  }
}
