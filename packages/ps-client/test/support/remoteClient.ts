import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ShardSpec } from '../../src/index.js';

const entry = fileURLToPath(new URL('./client-process.ts', import.meta.url));
const toBits = (f: Float32Array): number[] =>
  Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));
const fromBits = (b: number[]): Float32Array => new Float32Array(Uint32Array.from(b).buffer);

/** The subset of PsClient the end-to-end workload uses, served by a PsClient in a child process. */
export class RemoteClient {
  readonly #proc: ChildProcess;
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  #next = 1;

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    proc.on(
      'message',
      (m: { id?: number; value?: unknown; error?: { code?: string; message: string } }) => {
        if (m.id === undefined) return;
        const p = this.#pending.get(m.id);
        this.#pending.delete(m.id);
        if (m.error !== undefined)
          p?.reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
        else p?.resolve(m.value);
      },
    );
    proc.once('exit', (code) => {
      for (const p of this.#pending.values()) p.reject(new Error(`client process exited ${code}`));
      this.#pending.clear();
    });
  }

  static async connect(
    servers: ShardSpec[],
    secret: string,
    transport: 'rdma' | 'tcp' | 'auto' = 'tcp',
  ): Promise<RemoteClient> {
    const proc = fork(entry, [], {
      execArgv: ['--conditions=@rdmajs/source', '--import', 'tsx'],
      stdio: 'inherit',
    });
    await new Promise<void>((resolve, reject) => {
      proc.once('message', () => resolve());
      proc.once('exit', (c) => reject(new Error(`client process exited ${c} before it was ready`)));
    });
    const c = new RemoteClient(proc);
    await c.#call({ op: 'connect', servers, secret, transport });
    return c;
  }

  #call(msg: Record<string, unknown>): Promise<unknown> {
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#proc.send({ id, ...msg });
    });
  }

  async pull(table: string, keys: BigUint64Array): Promise<Float32Array> {
    return fromBits(
      (await this.#call({ op: 'pull', table, keys: Array.from(keys, String) })) as number[],
    );
  }

  async push(table: string, keys: BigUint64Array, grads: Float32Array): Promise<unknown> {
    return this.#call({ op: 'push', table, keys: Array.from(keys, String), grads: toBits(grads) });
  }

  async pullDense(name: string): Promise<Float32Array> {
    return fromBits((await this.#call({ op: 'pullDense', name })) as number[]);
  }

  async pushDense(name: string, grads: Float32Array): Promise<unknown> {
    return this.#call({ op: 'pushDense', name, grads: toBits(grads) });
  }

  /** SIGKILLs the child if it is still running (afterAll, whatever failed before). */
  kill(): void {
    if (this.#proc.exitCode === null && this.#proc.signalCode === null) this.#proc.kill('SIGKILL');
  }

  async close(): Promise<void> {
    if (this.#proc.exitCode !== null) return;
    const exited = new Promise((r) => this.#proc.once('exit', r));
    await this.#call({ op: 'close' }).catch(() => {});
    await exited;
  }
}
