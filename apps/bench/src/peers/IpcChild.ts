import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { peerExecArgv } from './peerLaunch.js';

/** What a child sends once: `{ ready: true }` when it serves requests, or why it could not. */
type StartMessage = { ready: true } | { startError: string };
type ReplyMessage = { id: number; result?: unknown; error?: string };

/**
 * A bench peer script forked through tsx, with request/response over IPC. Messages use the
 * structured-clone serialization, so typed arrays cross as they are (no JSON of numbers).
 * Every wait has a deadline, and a child that misses one is killed: a stuck peer never
 * outlives its request, and `kill()` / `close()` leave no process behind. The child exits
 * by itself when the channel closes (see `exitWithParent`), so it never outlives the bench.
 */
export class IpcChild<Req extends { op: string }> {
  readonly #proc: ChildProcess;
  readonly #name: string;
  readonly #pending = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: Error) => void }
  >();
  readonly #exited: Promise<void>;
  #next = 1;

  private constructor(proc: ChildProcess, name: string) {
    this.#proc = proc;
    this.#name = name;
    this.#exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    proc.on('message', (m: ReplyMessage) => {
      const p = typeof m?.id === 'number' ? this.#pending.get(m.id) : undefined;
      if (p === undefined) return;
      this.#pending.delete(m.id);
      if (typeof m.error === 'string') p.reject(new Error(`${name}: ${m.error}`));
      else p.resolve(m.result);
    });
    proc.once('exit', (code, signal) => {
      for (const p of this.#pending.values())
        p.reject(new Error(`${name} exited (${code ?? signal})`));
      this.#pending.clear();
    });
  }

  /** Forks `script` with `args` and waits (at most `startTimeoutMs`) for its ready message. */
  static async fork<Req extends { op: string }>(
    script: URL,
    args: readonly string[],
    name: string,
    startTimeoutMs = 60_000,
  ): Promise<IpcChild<Req>> {
    const proc = fork(fileURLToPath(script), [...args], {
      execArgv: [
        // BENCH_CPU_PROF_DIR=<dir>: each peer writes a V8 CPU profile there when it exits, as
        // the ps shards do (the bench's own `node --cpu-prof` does not reach its children).
        ...(process.env.BENCH_CPU_PROF_DIR
          ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR}`]
          : []),
        ...peerExecArgv,
      ],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    const child = new IpcChild<Req>(proc, name);
    try {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(
          () => reject(new Error(`${name} did not start within ${startTimeoutMs} ms`)),
          startTimeoutMs,
        );
        const done = (err?: Error) => {
          clearTimeout(t);
          proc.off('message', onMessage);
          proc.off('exit', onExit);
          if (err) reject(err);
          else resolve();
        };
        const onMessage = (m: StartMessage) => {
          if ('startError' in m) done(new Error(`${name}: ${m.startError}`));
          else if (m.ready) done();
        };
        const onExit = (c: number | null, s: string | null) =>
          done(new Error(`${name} exited during start (${c ?? s})`));
        proc.on('message', onMessage);
        proc.once('exit', onExit);
      });
    } catch (err) {
      await child.kill();
      throw err;
    }
    return child;
  }

  get pid(): number {
    return this.#proc.pid as number;
  }

  get running(): boolean {
    return this.#proc.exitCode === null && this.#proc.signalCode === null;
  }

  /** One request; the child is killed if it does not answer within `timeoutMs`. */
  request<T>(req: Req, timeoutMs: number): Promise<T> {
    if (!this.running) return Promise.reject(new Error(`${this.#name} is not running`));
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      // Rejected once the child is gone: whoever sees the error has no process left over.
      const t = setTimeout(() => {
        this.#pending.delete(id);
        const err = new Error(`${this.#name}: ${req.op} timed out after ${timeoutMs} ms`);
        void this.kill().then(() => reject(err));
      }, timeoutMs);
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

  /** SIGKILL, resolved once the process is gone. */
  async kill(): Promise<void> {
    if (this.running) this.#proc.kill('SIGKILL');
    await this.#exited;
  }

  /** Asks the child to exit (`exit` request); kills it if it does not within `timeoutMs`. */
  async close(exit: Req, timeoutMs = 10_000): Promise<void> {
    if (!this.running) return this.#exited;
    await this.request(exit, timeoutMs).catch(() => undefined);
    const t = setTimeout(() => this.#proc.kill('SIGKILL'), timeoutMs);
    await this.#exited;
    clearTimeout(t);
  }
}

/**
 * In a child script: exit when the bench's end of the IPC channel closes (the bench exited or
 * crashed), so a peer never outlives it.
 */
export function exitWithParent(): void {
  process.on('disconnect', () => process.exit(1));
}

/**
 * In a child script: exits with the parent, reads the JSON argument it was forked with
 * (argv[2]) and returns what `open` makes of it; when `open` fails, the parent gets the reason
 * as the start error (IpcChild.fork rejects with it) and the child exits.
 */
export async function openChild<A, T>(open: (args: A) => Promise<T>): Promise<T> {
  exitWithParent();
  try {
    return await open(JSON.parse(process.argv[2] ?? '{}') as A);
  } catch (err) {
    process.send?.({ startError: (err as Error).message });
    process.exit(1);
  }
}

/**
 * In a child script: answers every request with `handle`'s result or its error's message
 * (matched by `id`), then tells the parent it is ready.
 */
export function serveChild<Req>(handle: (m: Req) => Promise<unknown>): void {
  process.on('message', (m: Req & { id: number }) => {
    void handle(m).then(
      (result) => process.send?.({ id: m.id, result }),
      (err: Error) => process.send?.({ id: m.id, error: err.message }),
    );
  });
  process.send?.({ ready: true });
}
