import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { SparseTableConfig } from '@rdmajs/ps-server';

const CALL_TIMEOUT_MS = 30_000;

type Waiter = { resolve: (v: unknown) => void; reject: (e: Error) => void };

/** The gRPC parameter-store server as a forked child process; every IPC call has a deadline. */
export class GrpcStoreServer {
  readonly #proc: ChildProcess;
  readonly #pending = new Map<number, Waiter>();
  #nextId = 1;
  #port = 0;

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    proc.on('message', (m: { id?: number; result?: unknown; error?: string }) => {
      const p = m.id === undefined ? undefined : this.#pending.get(m.id);
      if (!p) return;
      this.#pending.delete(m.id as number);
      if (m.error !== undefined) p.reject(new Error(`grpc server: ${m.error}`));
      else p.resolve(m.result);
    });
    proc.on('exit', (code, signal) => {
      for (const p of this.#pending.values())
        p.reject(new Error(`grpc server exited (${code ?? signal})`));
      this.#pending.clear();
    });
  }

  get port(): number {
    return this.#port;
  }

  /** The server process (its CPU and RSS are read from /proc by the evaluation). */
  get pid(): number {
    return this.#proc.pid as number;
  }

  static async start(tables: SparseTableConfig[]): Promise<GrpcStoreServer> {
    const script = fileURLToPath(new URL('./grpc-server.ts', import.meta.url));
    const proc = fork(script, [], {
      execArgv: ['--import', 'tsx', '--conditions=@rdmajs/source'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('grpc server did not start in 30 s')), 30_000);
      proc.once('message', () => {
        clearTimeout(t);
        resolve();
      });
      proc.once('exit', (c) => reject(new Error(`grpc server exited during start (${c})`)));
    });
    const self = new GrpcStoreServer(proc);
    try {
      self.#port = (await self.#call<{ port: number }>({ op: 'start', tables })).port;
    } catch (err) {
      proc.kill('SIGKILL');
      throw err;
    }
    return self;
  }

  #call<T>(msg: Record<string, unknown>): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`grpc server ${String(msg.op)} timed out`));
      }, CALL_TIMEOUT_MS);
      this.#pending.set(id, {
        resolve: (v) => {
          clearTimeout(t);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(t);
          reject(e);
        },
      });
      this.#proc.send({ ...msg, id });
    });
  }

  /** The server process's CPU time so far, µs. */
  cpuUs(): Promise<number> {
    return this.#call<number>({ op: 'cpu' });
  }

  async close(): Promise<void> {
    if (this.#proc.exitCode !== null || this.#proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.#proc.once('exit', () => r()));
    this.#proc.send({ op: 'exit', id: 0 });
    const t = setTimeout(() => this.#proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(t);
  }
}
