// Runs a command as nobody (uid/gid 65534) with the caller's rlimits: the rxe lane's
// guest runs as root, whose CAP_IPC_LOCK exempts it from `ulimit -l`.
import { spawnSync } from 'node:child_process';

const [cmd, ...args] = process.argv.slice(2);
if (!cmd) throw new Error('usage: node as-nobody.mjs <command> [args...]');
const r = spawnSync(cmd, args, { stdio: 'inherit', uid: 65534, gid: 65534 });
if (r.error) throw r.error;
process.exit(r.status ?? 1);
