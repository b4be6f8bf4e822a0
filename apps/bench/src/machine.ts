import { cpus, hostname, platform, release } from 'node:os';

export interface MachineInfo {
  hostname: string;
  cpuModel: string;
  cpuCount: number;
  node: string;
  platform: string;
  kernel: string;
  /** The verbs provider of the RDMA rows: `soft` or `ibverbs` (with its device names). */
  provider: string;
  rdmaDevices?: string[];
}

export function machineInfo(provider: string, rdmaDevices?: string[]): MachineInfo {
  const c = cpus();
  return {
    provider,
    ...(rdmaDevices ? { rdmaDevices } : {}),
    hostname: hostname(),
    cpuModel: c[0]?.model ?? 'unknown',
    cpuCount: c.length,
    node: process.version,
    platform: platform(),
    kernel: release(),
  };
}
