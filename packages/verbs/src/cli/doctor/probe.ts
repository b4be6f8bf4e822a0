// The end-to-end check: open the device as an application would, register memory and
// create a CQ and a QP. What fails here fails in the application too.
import { Access, openDevice, type ProviderName } from '../../index.js';
import { type CheckContext, type CheckResult, formatBytes, result } from './check.js';

/** Registering is real pinning on ibverbs: the probe stays below this. */
export const PROBE_MAX_BYTES = 64 << 20;

export interface ProbeTarget {
  provider: ProviderName;
  /** ibverbs device name, when one was chosen. */
  device?: string | undefined;
}

export function probe(target: ProbeTarget, ctx: CheckContext): CheckResult {
  const title = `open, register, create a QP (${target.provider})`;
  const bytes = Math.min(ctx.registerBytes, PROBE_MAX_BYTES);
  let step = 'openDevice';
  let dev: ReturnType<typeof openDevice> | undefined;
  try {
    dev = openDevice({
      provider: target.provider,
      ...(target.device === undefined ? {} : { name: target.device }),
    });
    step = 'allocPd';
    const pd = dev.allocPd();
    step = `allocMr(${formatBytes(bytes)})`;
    pd.allocMr(bytes, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead);
    step = 'createCq';
    const cq = dev.createCq({ capacity: 64 });
    step = 'createQp';
    pd.createQp({ sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
    return result(
      'probe',
      title,
      'ok',
      `${dev.info.name}: registered ${formatBytes(bytes)}, created a CQ and a QP`,
      {
        data: { device: dev.info.name, registeredBytes: bytes },
      },
    );
  } catch (err) {
    const e = err as { code?: string; message?: string };
    return result(
      'probe',
      title,
      'fail',
      `${step} failed: ${e.code ?? 'error'}: ${e.message ?? String(err)}`,
      {
        fix: 'see the checks above for the cause',
        data: { step, code: e.code ?? null },
      },
    );
  } finally {
    dev?.close();
  }
}
