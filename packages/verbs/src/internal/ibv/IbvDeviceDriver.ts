// An ibverbs device (a real NIC, or the kernel's rxe/siw) through libibverbs.
import { RdmaError } from '../../errors.js';
import type { DeviceInfo, LinkListener } from '../../types.js';
import type { DeviceDriver, QpHost, QpPath } from '../driver.js';
import type { IbvDeviceStatus, IbvNativeDevice, IbvStatus } from '../native.js';
import { exactU64 } from '../u64.js';
import { invalid, optInt } from '../validate.js';
import { IbvQpDriver } from './IbvQpDriver.js';

export const IBV_PORT_ACTIVE = 4;
const PORT_STATES = ['DOWN', 'DOWN', 'INIT', 'ARMED', 'ACTIVE', 'ACTIVE'] as const;

export function ibvInfo(d: IbvDeviceStatus): DeviceInfo {
  const l = d.limits;
  const maxMsgSize = Math.min(...d.ports.map((p) => p.maxMsgSize), 2 ** 31);
  return {
    name: d.name,
    provider: 'ibverbs',
    guid: d.guid,
    ports: d.ports.map((p) => ({
      port: p.port,
      state: PORT_STATES[p.state] ?? 'DOWN',
      activeMtu: 128 << p.activeMtu,
      linkLayer: p.linkLayer,
      lid: p.lid,
      gids: p.gids.map((g) => g.gid),
      gidTable: p.gids,
    })),
    limits: {
      maxQp: l.maxQp,
      maxQpWr: l.maxQpWr,
      maxSge: l.maxSge,
      maxCq: l.maxCq,
      maxCqe: l.maxCqe,
      maxMr: l.maxMr,
      maxMrSize: exactU64(l.maxMrSize),
      maxMsgSize,
      maxInlineData: l.maxInlineData,
      maxSrq: l.maxSrq,
      maxSrqWr: l.maxSrqWr,
    },
  };
}

export function ibverbsUnavailable(status: IbvStatus): RdmaError {
  const what = status.compiled ? 'no RDMA device was found' : 'it was not compiled in';
  return new RdmaError(
    'ERR_RDMA_PROVIDER_UNAVAILABLE',
    `the ibverbs provider is not available: ${what} (${status.reason ?? 'see rdmajs devices'}); provider: 'soft' is available on every host`,
  );
}

export class IbvDeviceDriver implements DeviceDriver {
  readonly info: DeviceInfo;
  readonly native: IbvNativeDevice;
  readonly postRecord: Uint32Array;
  readonly doorbellWakesAll = false;

  constructor(info: DeviceInfo, native: IbvNativeDevice, postRecord: Uint32Array) {
    this.info = info;
    this.native = native;
    this.postRecord = postRecord;
  }

  checkPath(path: QpPath): QpPath {
    const ports = this.info.ports.map((p) => p.port);
    const port = optInt('port', path.port, 1, 255, ports[0] ?? 1);
    if (!ports.includes(port))
      throw invalid(`device ${this.info.name} has no port ${port} (ports: ${ports.join(', ')})`);
    const table = this.info.ports.find((p) => p.port === port)?.gidTable ?? [];
    if (path.gidIndex !== undefined) {
      const gidIndex = optInt('gidIndex', path.gidIndex, 0, 255, 0);
      if (!table.some((g) => g.index === gidIndex))
        throw invalid(`port ${port} of ${this.info.name} has no GID at index ${gidIndex}`);
      return { port, gidIndex };
    }
    return { port };
  }

  qp(host: QpHost, path: QpPath): IbvQpDriver {
    return new IbvQpDriver(host, this.native, path);
  }

  listen(): Promise<LinkListener> {
    return Promise.reject(
      invalid('listen() is for the soft provider: ibverbs QPs connect directly'),
    );
  }

  close(): void {
    this.native.close();
  }
}
