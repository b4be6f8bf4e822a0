import { RdmaTransport } from '@rdmajs/mux';

const secret = 'a-test-secret-of-at-least-32-bytes-long!';
const server = new RdmaTransport({});
const l = await server.listen({ port: 0, secret });
l.on('connection', () => {});
l.on('reject', (e) => console.log('reject', e.code, e.message));
const client = new RdmaTransport({});
const conns = [];
for (let i = 0; i < 200; i++) {
  try {
    conns.push(await client.connect({ host: '127.0.0.1', port: l.port, secret }));
  } catch (e) {
    console.log(i, e.code, e.message, e.cause?.message);
    break;
  }
}
console.log('connected', conns.length, JSON.stringify(client.allocator.stats()).slice(0, 300));
process.exit(0);
