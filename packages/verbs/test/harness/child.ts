// Spawns test/fixtures/peer.ts as a real child process and talks to it over IPC.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface ChildPeer {
  proc: ChildProcess;
  call<T = unknown>(op: string, args?: object, timeoutMs?: number): Promise<T>;
  kill(): Promise<void>;
}

export async function spawnPeer(): Promise<ChildPeer> {
  const script = fileURLToPath(new URL('../fixtures/peer.ts', import.meta.url));
  const proc = fork(script, [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let nextId = 1;
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('peer did not start within 20 s')), 20_000);
    proc.once('message', () => {
      clearTimeout(t);
      resolve();
    });
    proc.once('error', reject);
  });
  proc.on('message', (m: { id?: number; result?: unknown; error?: { message: string } }) => {
    const p = m.id === undefined ? undefined : pending.get(m.id);
    if (!p) return;
    pending.delete(m.id as number);
    if (m.error) p.reject(Object.assign(new Error(m.error.message), m.error));
    else p.resolve(m.result);
  });
  return {
    proc,
    call<T>(op: string, args: object = {}, timeoutMs = 10_000): Promise<T> {
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`peer ${op} timed out`)), timeoutMs);
        pending.set(id, {
          resolve: (v) => {
            clearTimeout(t);
            resolve(v as T);
          },
          reject: (e) => {
            clearTimeout(t);
            reject(e);
          },
        });
        proc.send({ id, op, ...args });
      });
    },
    kill() {
      return new Promise((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGKILL');
      });
    },
  };
}
