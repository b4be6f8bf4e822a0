import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ServerPeerArgs } from '../fixtures/server-peer.js';

const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/${name}`, import.meta.url));

/** A forked process (loopback only) driven over IPC; modelled on mux's spawnContractPeer. */
export interface Peer {
  readonly proc: ChildProcess;
  readonly port: number;
  ask<T>(op: string): Promise<T>;
  signal(sig: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): void;
  /** SIGKILLs the process (if alive) and waits for its exit. */
  kill(): Promise<void>;
}

function start(
  script: string,
  args: unknown,
  first: (m: Record<string, unknown>) => number | undefined,
): Promise<Peer> {
  const proc = fork(fixture(script), [JSON.stringify(args)], {
    execArgv: ['--conditions=@rdmajs/source', '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const alive = (): boolean => proc.exitCode === null && proc.signalCode === null;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let nextId = 1;
  const pending = new Map<number, (v: unknown) => void>();
  proc.on('message', (m: { id?: number; result?: unknown }) => {
    const f = m.id === undefined ? undefined : pending.get(m.id);
    if (f === undefined) return;
    pending.delete(m.id as number);
    f(m.result);
  });
  return new Promise<Peer>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${script} did not start within 30 s`)), 30_000);
    const onMessage = (m: Record<string, unknown>): void => {
      const port = first(m);
      if (port === undefined) return;
      clearTimeout(t);
      proc.off('message', onMessage);
      resolve({
        proc,
        port,
        ask: <T>(op: string) =>
          new Promise<T>((res, rej) => {
            const id = nextId++;
            const timer = setTimeout(() => rej(new Error(`${script}: ${op} unanswered`)), 30_000);
            pending.set(id, (v) => {
              clearTimeout(timer);
              res(v as T);
            });
            proc.send({ id, op });
          }),
        signal: (sig) => {
          if (alive()) proc.kill(sig);
        },
        kill: async () => {
          if (alive()) proc.kill('SIGKILL');
          await exited;
        },
      });
    };
    proc.on('message', onMessage);
    proc.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`${script} exited with ${code} before it was ready`));
    });
  });
}

export function spawnServer(args: ServerPeerArgs): Promise<Peer> {
  return start('server-peer.ts', args, (m) => (typeof m.ready === 'number' ? m.ready : undefined));
}

export function spawnClient(args: { port: number; secret: string }): Promise<Peer> {
  return start('client-peer.ts', args, (m) => (m.called === true ? args.port : undefined));
}
