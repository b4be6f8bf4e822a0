// Picks the provider to check (as openDevice would) and runs every check for it.
import {
  type DeviceInfo,
  type IbvStatus,
  ibverbsStatus,
  listDevices,
  type ProviderName,
} from '../../index.js';
import { type CheckContext, type CheckResult, result } from './check.js';
import { type Host, systemHost } from './host.js';
import { checkKernel, checkModules } from './kernel.js';
import { checkMemlock } from './memlock.js';
import { checkSharedMemory } from './memory.js';
import { checkActivePort, checkGid, checkMtu, type PortFacts } from './ports.js';
import { type ProbeTarget, probe } from './probe.js';
import { checkPtrace } from './ptrace.js';

export interface DoctorOptions {
  provider: 'auto' | ProviderName;
  /** An ibverbs device by name (default: the one `openDevice` would take). */
  device?: string | undefined;
  /** Bytes the application will register per process. */
  registerBytes: number;
}

export interface DoctorReport {
  asked: DoctorOptions['provider'];
  /** The provider checked: the asked one, or what 'auto' resolves to on this host. */
  provider: ProviderName;
  /** The ibverbs device checked, if any. */
  device: string | null;
  /** False when the provider cannot work here (a check failed). */
  ok: boolean;
  checks: CheckResult[];
}

/** What the checks read through the public API; injectable for tests. */
export interface DoctorDeps {
  host: Host;
  listDevices: () => DeviceInfo[];
  ibverbsStatus: () => IbvStatus;
  probe: (target: ProbeTarget, ctx: CheckContext) => CheckResult;
}

const systemDeps: DoctorDeps = { host: systemHost, listDevices, ibverbsStatus, probe };

function report(
  asked: DoctorOptions['provider'],
  provider: ProviderName,
  device: string | null,
  checks: CheckResult[],
): DoctorReport {
  return { asked, provider, device, ok: checks.every((c) => c.status !== 'fail'), checks };
}

export function runDoctor(options: DoctorOptions, deps: DoctorDeps = systemDeps): DoctorReport {
  let devices: DeviceInfo[];
  let status: IbvStatus;
  try {
    devices = deps.listDevices();
    status = deps.ibverbsStatus();
  } catch (err) {
    const e = err as { code?: string; message?: string };
    const addon = result(
      'addon',
      'native addon',
      'fail',
      `${e.code ?? 'error'}: ${e.message ?? String(err)}`,
      {
        fix: 'reinstall with a compiler present (python3, make, g++): `npm rebuild @rdmajs/verbs`',
      },
    );
    return report(options.provider, options.provider === 'ibverbs' ? 'ibverbs' : 'soft', null, [
      addon,
    ]);
  }
  const ibv = devices.filter((d) => d.provider === 'ibverbs');
  const active = (d: DeviceInfo) => d.ports.some((p) => p.state === 'ACTIVE');
  const device =
    options.device === undefined
      ? (ibv.find(active) ?? ibv[0])
      : ibv.find((d) => d.name === options.device);
  // As openDevice: a named device is an ibverbs one; unnamed, 'auto' needs an ACTIVE port.
  const provider: ProviderName =
    options.provider !== 'auto'
      ? options.provider
      : options.device !== undefined || (device && active(device))
        ? 'ibverbs'
        : 'soft';
  const ctx: CheckContext = { provider, registerBytes: options.registerBytes };
  const facts: PortFacts = {
    device,
    reason:
      options.device !== undefined && !device
        ? `no ibverbs device named ${options.device}; found: ${ibv.map((d) => d.name).join(', ') || 'none'}`
        : status.reason,
  };
  const checks: CheckResult[] = [
    result(
      'addon',
      'native addon',
      'ok',
      `loads; ibverbs provider ${status.compiled ? 'compiled in' : 'not compiled in (built without libibverbs headers)'}`,
      { data: { ibverbsCompiled: status.compiled } },
    ),
  ];
  if (provider === 'ibverbs' && !status.compiled)
    checks.push(
      result('libibverbs', 'libibverbs', 'fail', 'the addon was built without libibverbs headers', {
        fix: 'install libibverbs-dev and rebuild: `npm rebuild @rdmajs/verbs --build-from-source`',
      }),
    );
  checks.push(
    checkKernel(deps.host, ctx),
    checkPtrace(deps.host, ctx),
    checkSharedMemory(deps.host, ctx),
    checkMemlock(deps.host, ctx),
    checkModules(deps.host, ctx),
    checkActivePort(facts, ctx),
    checkGid(facts, ctx),
    checkMtu(deps.host, facts, ctx),
  );
  // The probe runs only when the checks leave a chance: its error would repeat theirs.
  if (checks.every((c) => c.status !== 'fail'))
    checks.push(
      deps.probe({ provider, device: provider === 'ibverbs' ? device?.name : undefined }, ctx),
    );
  return report(
    options.provider,
    provider,
    provider === 'ibverbs' ? (device?.name ?? null) : null,
    checks,
  );
}
