// `rdmajs doctor`: checks what RDMA needs on this host, says what is wrong and how to fix
// it; exits 1 when the chosen provider cannot work here.
import { parseOptions, usageError } from './args.js';
import { formatBytes, parseSize } from './doctor/check.js';
import { renderText } from './doctor/render.js';
import { type DoctorOptions, runDoctor } from './doctor/run.js';

/** One allocator arena (RegisteredAllocator's default maxArenaBytes). */
const DEFAULT_REGISTER = 16 << 20;

export const doctorUsage = `rdmajs doctor [--provider auto|soft|ibverbs] [--device <name>] [--register <size>] [--json]
    check locked memory, ports, GIDs, MTU, kernel modules, ptrace scope and shared
    memory for a provider (default auto); --register is the memory one process will
    register (default ${formatBytes(DEFAULT_REGISTER)}; suffixes k, m, g); exit 1 when it cannot work`;

export function doctor(args: string[]): number {
  const opts = parseOptions(args, {
    provider: { type: 'string', default: 'auto' },
    device: { type: 'string' },
    register: { type: 'string' },
    json: { type: 'boolean' },
  });
  const { provider, device, register } = opts;
  if (provider !== 'auto' && provider !== 'soft' && provider !== 'ibverbs')
    throw usageError(`--provider must be auto, soft or ibverbs, got ${String(provider)}`);
  const registerBytes = register === undefined ? DEFAULT_REGISTER : parseSize(String(register));
  if (registerBytes === undefined || registerBytes < 1)
    throw usageError(`--register must be a size such as 4096, 64m or 2g, got ${String(register)}`);
  if (device !== undefined && provider === 'soft')
    throw usageError('--device names an ibverbs device; the soft provider has one (soft0)');
  const options: DoctorOptions = {
    provider,
    device: device === undefined ? undefined : String(device),
    registerBytes,
  };
  const report = runDoctor(options);
  process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : renderText(report));
  return report.ok ? 0 : 1;
}
