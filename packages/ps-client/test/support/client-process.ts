// A PsClient in its own process, driven over IPC by the end-to-end test: the second of the
// two clients. Floats travel as their u32 bit patterns, keys as decimal strings, so nothing
// is rounded on the way.
import { PsClient, type ShardSpec } from '../../src/index.js';

type Request =
  | {
      id: number;
      op: 'connect';
      servers: ShardSpec[];
      secret: string;
      transport?: 'rdma' | 'tcp' | 'auto';
    }
  | { id: number; op: 'pull'; table: string; keys: string[] }
  | { id: number; op: 'push'; table: string; keys: string[]; grads: number[] }
  | { id: number; op: 'pullDense'; name: string }
  | { id: number; op: 'pushDense'; name: string; grads: number[] }
  | { id: number; op: 'close' };

const toBits = (f: Float32Array): number[] =>
  Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));
const fromBits = (b: number[]): Float32Array => new Float32Array(Uint32Array.from(b).buffer);
const keysOf = (k: string[]): BigUint64Array => BigUint64Array.from(k, (s) => BigInt(s));

let client: PsClient | undefined;

async function handle(m: Request): Promise<unknown> {
  switch (m.op) {
    case 'connect':
      client = await PsClient.connect({
        servers: m.servers,
        transport: m.transport ?? 'tcp',
        secret: m.secret,
      });
      return client.writerId;
    case 'pull': {
      using rows = await (client as PsClient).pull(m.table, keysOf(m.keys));
      return toBits(rows.rows);
    }
    case 'push':
      return (client as PsClient).push(m.table, keysOf(m.keys), fromBits(m.grads));
    case 'pullDense':
      return toBits(await (client as PsClient).pullDense(m.name));
    case 'pushDense':
      return (client as PsClient).pushDense(m.name, fromBits(m.grads));
    case 'close':
      await client?.close();
      setImmediate(() => process.exit(0));
      return null;
  }
}

process.on('message', (m: Request) => {
  handle(m).then(
    (value) => process.send?.({ id: m.id, value }),
    (err: unknown) =>
      process.send?.({
        id: m.id,
        error: { code: (err as { code?: string }).code, message: String((err as Error).message) },
      }),
  );
});
process.send?.({ ready: true });
