import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { MIN_SECRET_BYTES } from '@rdmajs/mux';
import { PsServiceError } from '../errors.js';

/** A secret file larger than this is not a key (and is not read whole: /dev/zero stays out). */
export const MAX_SECRET_FILE_BYTES = 4096;

export interface SecretSource {
  /** `--secret-file`: its text, one trailing newline dropped, is the secret. */
  file?: string | undefined;
  /** Where `name` is looked up (and removed from): `process.env` in the CLI. */
  env: Record<string, string | undefined>;
  /** The environment variable. */
  name: string;
}

const configError = (message: string): PsServiceError =>
  new PsServiceError('ERR_PS_SERVICE_CONFIG', message);

/**
 * The shared secret, from a file or else the environment, as text used verbatim (a hex or
 * base64 key is accepted as it is written: clients pass the same text). The variable is
 * removed from `env` either way, so child processes and diagnostics that dump the environment
 * do not see it (the kernel's copy, /proc/<pid>/environ, keeps it: prefer the file). A file
 * that group or others may read or write is refused, as ssh refuses such a private key: a
 * secret others can read is not one, and a warning is easily missed in a log.
 */
export function readSecret(source: SecretSource): string {
  const fromEnv = source.env[source.name];
  delete source.env[source.name];
  const s = source.file !== undefined ? readSecretFile(source.file) : fromEnv;
  if (s === undefined || s.length === 0) {
    throw configError(`no secret: give --secret-file or set ${source.name}`);
  }
  const bytes = Buffer.byteLength(s);
  if (bytes < MIN_SECRET_BYTES) {
    throw configError(
      `the secret must be at least ${MIN_SECRET_BYTES} bytes, got ${bytes} (a random key, e.g. \`openssl rand -hex 32\`)`,
    );
  }
  return s;
}

function readSecretFile(file: string): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw configError(`secret file ${file}: ${(err as Error).message}`);
  }
  try {
    const st = fstatSync(fd);
    // Mode bits mean nothing on Windows; everywhere else only the owner may have access.
    if (process.platform !== 'win32' && (st.mode & 0o077) !== 0) {
      throw configError(
        `secret file ${file} is accessible to group or others (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it`,
      );
    }
    const buf = Buffer.alloc(MAX_SECRET_FILE_BYTES + 1);
    let n = 0;
    for (;;) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
      if (n > MAX_SECRET_FILE_BYTES) {
        throw configError(`secret file ${file} is larger than ${MAX_SECRET_FILE_BYTES} bytes`);
      }
    }
    return buf
      .subarray(0, n)
      .toString('utf8')
      .replace(/\r?\n$/, '');
  } finally {
    closeSync(fd);
  }
}
