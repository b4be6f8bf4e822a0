// The gRPC baseline's server, run as a forked child (GrpcStoreServer, on IpcChild): a
// ParameterStore served over @grpc/grpc-js on loopback. The parent sends { op: 'start',
// tables }, gets { port }; it asks { op: 'cpu' } for this process's CPU time, { op: 'gc' } for
// its GCs so far, and { op: 'exit' } to stop. It exits when the bench does.
import * as grpc from '@grpc/grpc-js';
import { ParameterStore } from '@rdmajs/ps-server';
import { exitWithParent } from '../../peers/IpcChild.js';
import { cpuNowUs } from '../../stats/cpu.js';
import { GcTally } from '../../stats/GcTally.js';
import type { GrpcServerRequest } from './GrpcStoreServer.js';
import { loadService } from './protocol.js';
import { storeHandlers } from './storeService.js';

type Msg = { id: number } & GrpcServerRequest;

exitWithParent();

let server: grpc.Server | undefined;
const gc = new GcTally().start();

const reply = (id: number, result: unknown, error?: string) =>
  process.send?.(error === undefined ? { id, result } : { id, error });

process.on('message', (m: Msg) => {
  if (m.op === 'cpu') return reply(m.id, cpuNowUs());
  if (m.op === 'gc') return void gc.settled().then((counts) => reply(m.id, counts));
  if (m.op === 'exit') {
    const bye = () => process.exit(0);
    if (!server) return bye();
    // Bounded: a graceful shutdown that does not finish in 2 s is forced.
    const t = setTimeout(() => server?.forceShutdown(), 2_000);
    server.tryShutdown(() => {
      clearTimeout(t);
      bye();
    });
    return;
  }
  if (m.op === 'start') {
    if (server) return reply(m.id, undefined, 'already started');
    try {
      const store = new ParameterStore({ tables: m.tables });
      const s = new grpc.Server({
        'grpc.max_receive_message_length': 256 << 20,
        'grpc.max_send_message_length': 256 << 20,
      });
      s.addService(loadService().definition, storeHandlers(store));
      s.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
        if (err) return reply(m.id, undefined, err.message);
        server = s;
        reply(m.id, { port });
      });
    } catch (err) {
      reply(m.id, undefined, (err as Error).message);
    }
  }
});
process.send?.({ ready: true });
