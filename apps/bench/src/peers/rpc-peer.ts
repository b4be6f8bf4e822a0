// The server of `pnpm bench rpc`, a real child process: an RpcServer with an idempotent
// 'echo' and a non-idempotent 'inc', listening on RdmaTransport (soft) and TcpTransport,
// its de-dup table persisted so a restarted peer resumes the bench's sessions. Reports its
// CPU over IPC. argv[2]: JSON { secret, key, stateFile, rdmaPort?, tcpPort? }.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { RdmaTransport } from '@rdmajs/mux';
import { DeduplicationTable, MethodRegistry, RpcServer } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { cpuNowUs } from '../stats/cpu.js';

const args = JSON.parse(process.argv[2] ?? '{}') as {
  secret: string;
  key: string;
  stateFile: string;
  rdmaPort?: number;
  tcpPort?: number;
  pollPolicy?: 'event' | 'adaptive' | 'busy';
};
const dedup = new DeduplicationTable();
let count = 0;
if (existsSync(args.stateFile)) {
  const saved = JSON.parse(readFileSync(args.stateFile, 'utf8')) as {
    count: number;
    dedup: string;
  };
  count = saved.count;
  dedup.restore(new Uint8Array(Buffer.from(saved.dedup, 'base64')));
}
const persist = (): void => {
  const tmp = `${args.stateFile}.tmp`;
  writeFileSync(
    tmp,
    JSON.stringify({ count, dedup: Buffer.from(dedup.save()).toString('base64') }),
  );
  renameSync(tmp, args.stateFile);
};
const reg = new MethodRegistry();
reg.register('echo', (p) => p, { idempotent: true });
reg.register('inc', () => {
  count++;
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, count);
  return b;
});
const server = new RpcServer(reg, {
  key: new Uint8Array(Buffer.from(args.key, 'hex')),
  dedup,
  onSessionChange: persist,
});
const rdma = await new RdmaTransport({
  pollPolicy: args.pollPolicy ?? 'adaptive',
  peerTimeoutMs: 60_000,
}).listen({ port: args.rdmaPort ?? 0, secret: args.secret });
const tcp = await new TcpTransport({ ...TCP_BASELINE_OPTIONS, peerTimeoutMs: 60_000 }).listen({
  port: args.tcpPort ?? 0,
  secret: args.secret,
});
for (const l of [rdma, tcp]) l.on('connection', (c) => server.serve(c));
process.on('message', (m: { id: number; op: string }) => {
  if (m.op === 'cpu') process.send?.({ id: m.id, result: cpuNowUs() });
});
// Ready: both listeners accept. The wall-clock stamp lets the bench time recovery from here.
process.send?.({
  ready: { rdmaPort: rdma.port, tcpPort: tcp.port, at: performance.timeOrigin + performance.now() },
});
