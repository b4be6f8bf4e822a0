import { type ChildProcess, fork } from 'node:child_process';
import { peerExecArgv, peerScriptPath } from './peerLaunch.js';
import type { PeerRequest } from './protocol.js';

/** The echo peer as a child process, with request/response over IPC (every call has a deadline). */
export class EchoPeer {
  readonly #proc: ChildProcess;
  readonly #pending = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: Error) => void }
  >();
  #nextId = 1;
  #readyWaiters: (() => void)[] = [];

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    proc.on('message', (m: { id?: number; result?: unknown; error?: string; ready?: boolean }) => {
      if (m.ready) {
        for (const w of this.#readyWaiters.splice(0)) w();
        return;
      }
      const p = m.id === undefined ? undefined : this.#pending.get(m.id);
      if (!p) return;
      this.#pending.delete(m.id as number);
      if (m.error) p.reject(new Error(`peer: ${m.error}`));
      else p.resolve(m.result);
    });
    proc.on('exit', (code, signal) => {
      for (const p of this.#pending.values())
        p.reject(new Error(`peer exited (${code ?? signal})`));
      this.#pending.clear();
    });
  }

  static async spawn(): Promise<EchoPeer> {
    const script = peerScriptPath('./echo-peer', import.meta.url);
    const proc = fork(script, [], {
      execArgv: [...peerExecArgv],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('echo peer did not start within 30 s')), 30_000);
      proc.once('message', () => {
        clearTimeout(t);
        resolve();
      });
      proc.once('exit', (c) => reject(new Error(`echo peer exited during start (${c})`)));
    });
    return new EchoPeer(proc);
  }

  call<T>(req: PeerRequest, timeoutMs = 180_000): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error(`peer ${req.op} timed out after ${timeoutMs} ms`)),
        timeoutMs,
      );
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
      this.#proc.send({ ...req, id });
    });
  }

  /** Resolves when the peer says it entered its spin loop. */
  ready(timeoutMs = 30_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('peer not ready in time')), timeoutMs);
      this.#readyWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  async close(): Promise<void> {
    if (this.#proc.exitCode !== null) return;
    const exited = new Promise<void>((r) => this.#proc.once('exit', () => r()));
    await this.call({ op: 'exit' }, 5_000).catch(() => this.#proc.kill('SIGKILL'));
    await exited;
  }
}
