import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Whether Debian's etcd-server (the `etcd` binary) is installed. */
export const haveEtcd = spawnSync('etcd', ['--version'], { encoding: 'utf8' }).status === 0;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a !== null ? a.port : 0));
    });
  });
}

export interface EtcdProcess {
  url: string;
  stop(): Promise<void>;
}

/** A single-member etcd on loopback ports with its own data directory; resolves once it serves. */
export async function startEtcd(): Promise<EtcdProcess> {
  const [client, peer] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), 'ps-etcd-'));
  const url = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const proc: ChildProcess = spawn(
    'etcd',
    [
      '--name',
      'ps-test',
      '--data-dir',
      dir,
      '--listen-client-urls',
      url,
      '--advertise-client-urls',
      url,
      '--listen-peer-urls',
      peerUrl,
      '--initial-advertise-peer-urls',
      peerUrl,
      '--initial-cluster',
      `ps-test=${peerUrl}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`etcd did not start: ${log.slice(-2000)}`)),
      30_000,
    );
    proc.stderr?.on('data', (d: Buffer) => {
      log = (log + d.toString()).slice(-8000);
      if (/ready to serve client requests/.test(log)) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.once('exit', (c) => {
      clearTimeout(timer);
      reject(new Error(`etcd exited ${c}: ${log.slice(-2000)}`));
    });
  });
  return {
    url,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
