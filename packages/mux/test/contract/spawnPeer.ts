import { type ChildProcess, fork } from 'node:child_process';
import type { ContractTransportOptions } from './ContractTarget.js';
import type { PeerArgs, PeerStats } from './peer.js';

/** A contract peer in its own process (loopback only), driven over IPC. */
export interface ContractPeer {
  readonly port: number;
  readonly proc: ChildProcess;
  stats(): Promise<PeerStats>;
  release(): Promise<void>;
  signal(sig: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): void;
  /** SIGKILLs the peer (if alive) and waits for its exit. */
  kill(): Promise<void>;
}

export async function spawnContractPeer(
  script: string,
  secret: string,
  options: Omit<ContractTransportOptions, 'receiveAllocator'> = {},
): Promise<ContractPeer> {
  const args: PeerArgs = { secret, options };
  const proc = fork(script, [JSON.stringify(args)], {
    execArgv: ['--conditions=@rdmajs/source', '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const port = await new Promise<number>((resolve, reject) => {
    const t = setTimeout(
      () => reject(new Error('contract peer did not start within 30 s')),
      30_000,
    );
    proc.once('message', (m: { ready?: number }) => {
      clearTimeout(t);
      if (typeof m.ready === 'number') resolve(m.ready);
      else reject(new Error('contract peer: unexpected first message'));
    });
    proc.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`contract peer exited with ${code} before it listened`));
    });
  });
  let nextId = 1;
  const pending = new Map<number, (v: unknown) => void>();
  proc.on('message', (m: { id?: number; result?: unknown }) => {
    const f = m.id === undefined ? undefined : pending.get(m.id);
    if (f === undefined) return;
    pending.delete(m.id as number);
    f(m.result);
  });
  const call = <T>(op: string): Promise<T> => {
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`contract peer: ${op} unanswered`)), 30_000);
      pending.set(id, (v) => {
        clearTimeout(t);
        resolve(v as T);
      });
      proc.send({ id, op });
    });
  };
  return {
    port,
    proc,
    stats: () => call<PeerStats>('stats'),
    release: () => call<void>('release'),
    signal: (sig) => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
    },
    kill: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}
