// The `rdmajs` command: `devices` and `doctor`. Exit codes: 0 done, 1 the host cannot do
// it (doctor found a problem, the addon does not load), 2 a usage error.
import { RdmaError } from '../index.js';
import { usageError } from './args.js';
import { devices, devicesUsage } from './devices.js';
import { doctor, doctorUsage } from './doctor.js';

const USAGE = `usage:\n  ${devicesUsage}\n  ${doctorUsage}\n`;

export function main(argv: string[]): number {
  const [command, ...args] = argv.slice(2);
  try {
    if (command === 'devices') return devices(args);
    if (command === 'doctor') return doctor(args);
    if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
      process.stdout.write(USAGE);
      return 0;
    }
    throw usageError(`unknown command ${command}`);
  } catch (err) {
    if (!(err instanceof RdmaError)) throw err;
    process.stderr.write(`rdmajs: ${err.message} (${err.code})\n`);
    if (err.code !== 'ERR_RDMA_INVALID_ARG') return 1;
    process.stderr.write(USAGE);
    return 2;
  }
}
