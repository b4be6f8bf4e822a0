// A peer process (`fixtures/lock-holder.ts`) connected to one of our QPs, which takes that
// QP's receive-queue lock in our segment when told to: the stopped- and running-holder tests
// share it.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Endpoint, QueuePair } from '../../src/index.js';

export interface LockHolder {
  readonly proc: ChildProcess;
  /** The holder's next message (`holding`, `released`, …). */
  next(): Promise<Record<string, unknown>>;
}

/** Starts the holder and connects it and `qp` to each other. */
export async function connectLockHolder(qp: QueuePair): Promise<LockHolder> {
  const proc = fork(fileURLToPath(new URL('../fixtures/lock-holder.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = () => new Promise<Record<string, unknown>>((r) => proc.once('message', r));
  await next();
  proc.send({ op: 'connect', endpoint: qp.endpoint() });
  const { endpoint } = (await next()) as { endpoint: Endpoint };
  qp.connect(endpoint);
  return { proc, next };
}
