// The host as the checks see it: /proc and /sys reads, injectable so tests can supply a
// host that is not this one.
import { accessSync, constants, readdirSync, readFileSync, statfsSync } from 'node:fs';
import { release } from 'node:os';

export interface Host {
  /** File contents, or undefined when missing or unreadable. */
  read(path: string): string | undefined;
  /** Directory entries, or undefined when missing. */
  list(path: string): string[] | undefined;
  /** Whether this process may open `path` for reading and writing. */
  readWrite(path: string): boolean;
  /** Free bytes of the file system holding `path` (statfs), or undefined. */
  freeBytes(path: string): number | undefined;
  /** `uname -r` */
  kernelRelease(): string;
}

export const systemHost: Host = {
  read(path) {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  },
  list(path) {
    try {
      return readdirSync(path);
    } catch {
      return undefined;
    }
  },
  readWrite(path) {
    try {
      accessSync(path, constants.R_OK | constants.W_OK);
      return true;
    } catch {
      return false;
    }
  },
  freeBytes(path) {
    try {
      const s = statfsSync(path);
      return s.bavail * s.bsize;
    } catch {
      return undefined;
    }
  },
  kernelRelease: release,
};
