// An echo over @rdmajs/tcp between two processes, written only against the published API
// of @rdmajs/tcp and @rdmajs/mux (run from a project that installed the tarballs).
// Parent: `node tcp-echo.mjs [messages]`; it forks itself as the echoing child.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { MuxError } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';

const SECRET = 'pack-install tcp echo secret, 32+ bytes';
const COUNT = Number(process.argv[2] ?? 100);
const transport = new TcpTransport();

if (process.argv[3] === '--child') {
  const listener = await transport.listen({ secret: SECRET });
  listener.on('connection', (conn) => {
    conn.on('channel', async (ch) => {
      for await (const m of ch) {
        await ch.send(m.bytes);
        m.release();
      }
      await ch.close();
    });
    conn.on('close', () => process.exit(0));
  });
  process.send({ port: listener.port });
} else {
  const child = fork(process.argv[1], [String(COUNT), '--child']);
  const [{ port }] = await once(child, 'message');
  const conn = await transport.connect({ port, secret: SECRET, timeoutMs: 10_000 });
  const ch = conn.openChannel('echo');
  for (let i = 0; i < COUNT; i++) {
    const out = new Uint8Array(1 + (i % 4096)).fill(i & 0xff);
    await ch.send(out, { timeoutMs: 10_000 });
    const m = await ch.receive({ timeoutMs: 10_000 });
    if (m.length !== out.length || m.bytes[0] !== (i & 0xff)) throw new Error(`echo ${i} differs`);
    m.release();
  }
  const wrong = await transport
    .connect({ port, secret: 'not the secret at all!, 32+ bytes' })
    .catch((e) => e);
  if (!(wrong instanceof MuxError) || wrong.code !== 'ERR_MUX_AUTH') throw new Error('auth');
  await conn.close({ timeoutMs: 10_000 });
  await once(child, 'exit');
  console.log(`tcp echo: ${COUNT} messages ok`);
}
