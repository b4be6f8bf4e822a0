// Registers <bytes> on the first ibverbs device and reports the outcome, so the rxe lane
// can hold doctor's memlock verdict against what ibv_reg_mr really does. Exit 0 when it
// registered, 3 when ibv_reg_mr refused it with ENOMEM (printed), 1 on anything else.
import { Access, openDevice } from '../../packages/verbs/dist/index.js';

const bytes = Number(process.argv[2]);
const dev = openDevice({ provider: 'ibverbs' });
try {
  dev.allocPd().allocMr(bytes, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead);
  console.log(`registered ${bytes} bytes on ${dev.info.name}`);
} catch (err) {
  console.log(`registering ${bytes} bytes failed: ${err.code} ${err.syscall ?? ''} ${err.message}`);
  process.exitCode = err.errno === 12 /* ENOMEM */ ? 3 : 1;
} finally {
  dev.close();
}
