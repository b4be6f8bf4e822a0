// The far end of `pnpm bench mux`, a real child process: a listener of the transport named on
// the command line (tcp, or rdma with a polling policy and a verbs provider) that echoes
// every message on every channel, and reports its own CPU time over IPC.
import type { Channel, Listener, PollPolicy } from '@rdmajs/mux';
import { RdmaTransport } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { openDevice } from '@rdmajs/verbs';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { cpuNowUs } from '../stats/cpu.js';

const secret = process.argv[2] ?? '';
const kind = process.argv[3] ?? 'tcp';
const pollPolicy = (process.argv[4] ?? 'event') as PollPolicy;
const provider = (process.argv[5] ?? 'soft') as 'soft' | 'ibverbs';
const LONG = { timeoutMs: 600_000 };

/**
 * Echoes every message of `ch` as it arrives (`listen`: no receive promise per message); each
 * is released once its echo no longer needs the memory.
 */
function echo(ch: Channel): void {
  ch.listen(
    (m) => {
      const release = () => m.release();
      ch.send(m.bytes, LONG).then(release, release);
    },
    () => void ch.close().catch(() => {}), // the bench closed the channel or the connection
  );
}

let listener: Listener;
if (kind === 'rdma') {
  const device = provider === 'soft' ? undefined : openDevice({ provider });
  const transport = new RdmaTransport({
    pollPolicy,
    qpPoolSize: 2,
    // The bench's MUX_BENCH_EAGER (inherited): both sides' thresholds, since the smaller wins.
    ...(process.env.MUX_BENCH_EAGER === undefined
      ? {}
      : { eagerThreshold: Number(process.env.MUX_BENCH_EAGER) }),
    ...(device === undefined ? {} : { device }),
  });
  listener = await transport.listen({ secret });
} else {
  listener = await new TcpTransport(TCP_BASELINE_OPTIONS).listen({ secret });
}
listener.on('connection', (conn) => {
  conn.on('error', () => {});
  conn.on('channel', echo);
});
process.on('message', (m: { id: number; op: string }) => {
  if (m.op === 'cpu') process.send?.({ id: m.id, result: cpuNowUs() });
  else if (m.op === 'exit') process.exit(0);
});
// The bench went away without killing us (it crashed, or was killed): so do we.
process.on('disconnect', () => process.exit(0));
process.send?.({ port: listener.port });
