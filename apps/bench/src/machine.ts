import { cpus, hostname, platform, release } from 'node:os';

export interface MachineInfo {
  hostname: string;
  cpuModel: string;
  cpuCount: number;
  node: string;
  platform: string;
  kernel: string;
}

export function machineInfo(): MachineInfo {
  const c = cpus();
  return {
    hostname: hostname(),
    cpuModel: c[0]?.model ?? 'unknown',
    cpuCount: c.length,
    node: process.version,
    platform: platform(),
    kernel: release(),
  };
}
