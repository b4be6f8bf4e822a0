// The one-sided read of mux's contract (Connection.read) has no TCP form: a TCP connection
// says so with supportsRead and a typed error, and stays usable.
import type { Connection, MuxError, ReadDescriptor } from '@rdmajs/mux';
import { RdmaTransport, ReadList } from '@rdmajs/mux';
import { expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'read-not-supported test secret, 32+ bytes';

it('tcp_connections_refuse_one_sided_reads_with_err_mux_not_supported', async () => {
  const transport = new TcpTransport();
  await using listener = await transport.listen({ secret: SECRET });
  const accepted = new Promise<Connection>((r) => listener.once('connection', r));
  await using client = await transport.connect({ port: listener.port, secret: SECRET });
  await using server = await accepted;
  expect(client.supportsRead).toBe(false);
  expect(server.supportsRead).toBe(false);
  const rdma = new RdmaTransport();
  try {
    const region = rdma.allocReadRegion(64);
    const list = new ReadList(1).add(0, 8, rdma.allocator.alloc(8));
    const descriptor: ReadDescriptor = region.descriptor;
    let err: MuxError | undefined;
    try {
      await client.read(descriptor, list);
    } catch (e) {
      err = e as MuxError;
    }
    expect(err?.code).toBe('ERR_MUX_NOT_SUPPORTED');
    expect(client.state).toBe('open');
  } finally {
    rdma.close();
  }
});
