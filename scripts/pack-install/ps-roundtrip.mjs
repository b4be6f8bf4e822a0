// A parameter-server shard (ps-service) and a client (ps-client) from the installed
// packages, over TCP on loopback: push then pull one row, dense too.
import { PsClient } from '@rdmajs/ps-client';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { TcpTransport } from '@rdmajs/tcp';

const secret = 'pack-install-secret-0123456789-abcdefghijklmnop';
const service = await PsService.start({
  transport: new TcpTransport(),
  secret,
  shardId: 's0',
  tables: parseServiceTables({
    tables: [{ name: 't', dim: 2, optimizer: { kind: 'sum' } }],
    dense: [{ name: 'd', shape: [3], optimizer: { kind: 'sum' } }],
  }),
});
const client = await PsClient.connect({
  servers: [`127.0.0.1:${service.port}`],
  transport: new TcpTransport(),
  secret,
});
await client.push('t', [7n], Float32Array.of(1, 2));
// pull() returns views of the reply (PulledRows): copy the row out, then release the reply.
const pulled = await client.pull('t', [7n]);
const row = Float32Array.from(pulled.rows);
pulled.release();
await client.pushDense('d', Float32Array.of(1, 2, 3));
const d = await client.pullDense('d');
await client.close();
await service.close();
if (row[0] !== 1 || row[1] !== 2 || d[2] !== 3) {
  console.error('ps round trip gave', row, d);
  process.exit(1);
}
console.log('ps round trip ok');
