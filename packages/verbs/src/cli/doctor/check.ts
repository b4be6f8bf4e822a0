// What every doctor check returns, and the helpers they share.
import type { ProviderName } from '../../index.js';

/** `skip`: not needed by the provider being checked (the data is still shown). */
export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface CheckResult {
  /** Stable id for tools reading `--json`. */
  id: string;
  title: string;
  status: CheckStatus;
  /** What was found. */
  detail: string;
  /** How to fix it, when status is `warn` or `fail`. */
  fix?: string;
  /** Measured values, for `--json`. */
  data?: Record<string, unknown>;
}

export interface CheckContext {
  /** The provider whose needs decide ok/fail. */
  provider: ProviderName;
  /** Bytes this host is expected to register per process (`--register`). */
  registerBytes: number;
}

export function result(
  id: string,
  title: string,
  status: CheckStatus,
  detail: string,
  extra: { fix?: string; data?: Record<string, unknown> } = {},
): CheckResult {
  return { id, title, status, detail, ...extra };
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;

export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return 'unlimited';
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${UNITS[u]}`;
}

/** `64m`, `16MiB`, `4096`, `1g` → bytes; undefined when malformed. */
export function parseSize(text: string): number | undefined {
  const m = /^(\d+)\s*([kmgt]?)(i?b)?$/i.exec(text.trim());
  if (!m?.[1]) return undefined;
  const shift = { '': 0, k: 10, m: 20, g: 30, t: 40 }[(m[2] ?? '').toLowerCase()] ?? 0;
  const n = Number(m[1]) * 2 ** shift;
  return Number.isSafeInteger(n) ? n : undefined;
}

/** Linux capability numbers the checks look for in CapEff. */
export const CAP_SYS_PTRACE = 19;
export const CAP_IPC_LOCK = 14;

/** Whether /proc/<pid>/status text grants capability `cap` in the effective set. */
export function hasCapability(status: string | undefined, cap: number): boolean {
  const hex = /^CapEff:\s*([0-9a-f]+)$/m.exec(status ?? '')?.[1];
  if (!hex) return false;
  return ((BigInt(`0x${hex}`) >> BigInt(cap)) & 1n) === 1n;
}
