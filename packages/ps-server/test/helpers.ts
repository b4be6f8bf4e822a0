import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export function tmpDir(prefix = 'ps-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function keys(...ks: Array<number | bigint>): BigUint64Array {
  return BigUint64Array.from(ks.map((k) => BigInt(k)));
}

/** Bit patterns of a Float32Array, for bit-identical comparisons (NaN, -0 included). */
export function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
}
