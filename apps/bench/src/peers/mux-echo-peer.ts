// The far end of `pnpm bench mux`, a real child process: a TcpTransport listener that
// echoes every message on every channel, and reports its own CPU time over IPC.
import type { Channel } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { cpuNowUs } from '../stats/cpu.js';

const secret = process.argv[2] ?? '';
const LONG = { timeoutMs: 600_000 };

async function echo(ch: Channel): Promise<void> {
  for (;;) {
    let m: Awaited<ReturnType<Channel['receive']>>;
    try {
      m = await ch.receive(LONG);
    } catch {
      break; // the bench closed the channel or the connection
    }
    try {
      await ch.send(m.bytes, LONG);
    } finally {
      m.release();
    }
  }
  await ch.close().catch(() => {});
}

const listener = await new TcpTransport().listen({ secret });
listener.on('connection', (conn) => {
  conn.on('error', () => {});
  conn.on('channel', (ch) => void echo(ch));
});
process.on('message', (m: { id: number; op: string }) => {
  if (m.op === 'cpu') process.send?.({ id: m.id, result: cpuNowUs() });
  else if (m.op === 'exit') process.exit(0);
});
process.send?.({ port: listener.port });
