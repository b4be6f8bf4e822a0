// Which provider doctor checks, and the port/GID/MTU checks of ibverbs devices, on
// devices described as listDevices() would (no RDMA hardware needed).
import { describe, expect, it } from 'vitest';
import type { CheckResult } from '../src/cli/doctor/check.js';
import { type DoctorDeps, runDoctor } from '../src/cli/doctor/run.js';
import type { DeviceInfo, PortInfo } from '../src/index.js';
import { fakeHost, limits } from './fixtures/fake-host.js';

const limitsOf: DeviceInfo['limits'] = {
  maxQp: 1024,
  maxQpWr: 4096,
  maxSge: 16,
  maxCq: 1024,
  maxCqe: 65536,
  maxMr: 1024,
  maxMrSize: 2n ** 40n,
  maxMsgSize: 2 ** 31,
  maxInlineData: 256,
  maxSrq: 64,
  maxSrqWr: 4096,
};

const softDevice: DeviceInfo = {
  name: 'soft0',
  provider: 'soft',
  guid: '0000:0000:0000:0000',
  ports: [
    { port: 1, state: 'ACTIVE', activeMtu: 4096, linkLayer: 'Shared memory', lid: 0, gids: [] },
  ],
  limits: limitsOf,
};

const V2 = { index: 1, gid: '0000:0000:0000:0000:0000:ffff:0a00:0002', type: 'RoCE v2' };
const V1 = { index: 0, gid: 'fe80:0000:0000:0000:5054:00ff:fe12:3456', type: 'IB/RoCE v1' };

function rxe(port: Partial<PortInfo> = {}): DeviceInfo {
  const gidTable = port.gidTable ?? [V1, V2];
  return {
    name: 'rxe0',
    provider: 'ibverbs',
    guid: '5054:00ff:fe12:3456',
    ports: [
      {
        port: 1,
        state: 'ACTIVE',
        activeMtu: 1024,
        linkLayer: 'Ethernet',
        lid: 0,
        gids: gidTable.map((g) => g.gid),
        ...port,
        gidTable,
      },
    ],
    limits: limitsOf,
  };
}

// A host where ibverbs has everything it needs besides what each test changes.
const goodHost = fakeHost({
  files: {
    '/proc/self/limits': limits('unlimited'),
    '/proc/modules': 'rdma_rxe 1 0 - Live 0x0\nib_uverbs 1 1 rdma_rxe, Live 0x0\n',
    '/proc/meminfo': 'MemAvailable:   8000000 kB\n',
    '/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0': 'eth0\n',
    '/sys/class/net/eth0/mtu': '1500\n',
  },
  dirs: { '/dev/infiniband': ['uverbs0'] },
  readWrite: ['/dev/infiniband/uverbs0'],
});

function deps(devices: DeviceInfo[], probed: string[] = []): DoctorDeps {
  return {
    host: goodHost,
    listDevices: () => [...devices, softDevice],
    ibverbsStatus: () => ({
      compiled: true,
      devices: [],
      ...(devices.length ? {} : { reason: 'libibverbs found no RDMA device' }),
    }),
    probe: (target) => {
      probed.push(`${target.provider}:${target.device ?? ''}`);
      return { id: 'probe', title: 'probe', status: 'ok', detail: 'fake probe' };
    },
  };
}

const check = (checks: CheckResult[], id: string) => checks.find((c) => c.id === id);
const REG = { registerBytes: 1 << 20 };

describe('doctor: the provider it checks', () => {
  it("'auto' checks soft where no ibverbs device has an ACTIVE port, ibverbs where one does", () => {
    const down = runDoctor({ provider: 'auto', ...REG }, deps([rxe({ state: 'DOWN' })]));
    expect(down).toMatchObject({ provider: 'soft', ok: true, device: null });
    const probed: string[] = [];
    const up = runDoctor({ provider: 'auto', ...REG }, deps([rxe()], probed));
    expect(up).toMatchObject({ provider: 'ibverbs', ok: true, device: 'rxe0' });
    expect(probed).toEqual(['ibverbs:rxe0']);
  });

  it('ibverbs without a device fails and gives the reason; the probe is not run', () => {
    const probed: string[] = [];
    const r = runDoctor({ provider: 'ibverbs', ...REG }, deps([], probed));
    expect(r.ok).toBe(false);
    expect(check(r.checks, 'port')).toMatchObject({ status: 'fail' });
    expect(check(r.checks, 'port')?.detail).toContain('libibverbs found no RDMA device');
    expect(probed).toEqual([]);
  });

  it('a named device that does not exist is a failure naming the ones that do', () => {
    const r = runDoctor({ provider: 'ibverbs', device: 'mlx5_0', ...REG }, deps([rxe()]));
    expect(r.ok).toBe(false);
    expect(check(r.checks, 'port')?.detail).toContain('found: rxe0');
  });

  it("'auto' with a device name checks ibverbs, so a missing device is not hidden behind soft", () => {
    const r = runDoctor({ provider: 'auto', device: 'mlx5_0', ...REG }, deps([]));
    expect(r).toMatchObject({ provider: 'ibverbs', ok: false });
  });

  it('without libibverbs on the host the fix is to install it', () => {
    const missing: DoctorDeps = {
      ...deps([]),
      ibverbsStatus: () => ({
        compiled: true,
        devices: [],
        reason: 'cannot load libibverbs.so.1 (install rdma-core / libibverbs1): not found',
      }),
    };
    const port = check(runDoctor({ provider: 'ibverbs', ...REG }, missing).checks, 'port');
    expect(port).toMatchObject({ status: 'fail' });
    expect(port?.fix).toContain('libibverbs1');
  });

  it('reports an addon that does not load as the one failing check', () => {
    const broken: DoctorDeps = {
      ...deps([]),
      listDevices: () => {
        throw Object.assign(new Error('no native addon loads'), { code: 'ERR_RDMA_NATIVE_LOAD' });
      },
    };
    const r = runDoctor({ provider: 'auto', ...REG }, broken);
    expect(r).toMatchObject({ ok: false, provider: 'soft' });
    expect(r.checks).toHaveLength(1);
    expect(r.checks[0]).toMatchObject({ id: 'addon', status: 'fail' });
    expect(r.checks[0]?.detail).toContain('ERR_RDMA_NATIVE_LOAD');
  });
});

describe('doctor: ibverbs ports', () => {
  const run = (d: DeviceInfo) => runDoctor({ provider: 'ibverbs', ...REG }, deps([d])).checks;

  it('a DOWN port fails with how to bring the link up', () => {
    const c = check(run(rxe({ state: 'DOWN' })), 'port');
    expect(c).toMatchObject({ status: 'fail' });
    expect(c?.fix).toContain('ip link set');
  });

  it('an InfiniBand port in INIT points at the subnet manager', () => {
    const c = check(run(rxe({ state: 'INIT', linkLayer: 'InfiniBand' })), 'port');
    expect(c?.fix).toContain('opensm');
  });

  it('picks the IPv4-mapped RoCE v2 GID; only v1 GIDs warn, no GID fails', () => {
    expect(check(run(rxe()), 'gid')).toMatchObject({ status: 'ok' });
    expect(check(run(rxe()), 'gid')?.detail).toContain(`GID[1] ${V2.gid}`);
    expect(check(run(rxe({ gidTable: [V1] })), 'gid')).toMatchObject({ status: 'warn' });
    const none = check(run(rxe({ gidTable: [] })), 'gid');
    expect(none).toMatchObject({ status: 'fail' });
    expect(none?.fix).toContain('ip addr add');
  });

  it('an InfiniBand port needs a LID', () => {
    const ib = (lid: number) => check(run(rxe({ linkLayer: 'InfiniBand', lid })), 'gid');
    expect(ib(7)).toMatchObject({ status: 'ok' });
    expect(ib(0)).toMatchObject({ status: 'fail' });
  });

  it("reports the MTU with the netdev's, and warns below 1024 B", () => {
    const ok = check(run(rxe()), 'mtu');
    expect(ok).toMatchObject({
      status: 'ok',
      data: { activeMtu: 1024, netdev: 'eth0', netdevMtu: 1500 },
    });
    const small = check(run(rxe({ activeMtu: 512 })), 'mtu');
    expect(small).toMatchObject({ status: 'warn' });
    expect(small?.fix).toContain('mtu 9000');
  });
});
