// CRC-32C (Castagnoli, reflected 0x82F63B78): the checksum of every snapshot tensor and every
// log record. Slicing-by-8 in JS (≈ 1 GB/s); ranges of NATIVE_MIN_BYTES or more go to the
// kernels addon when it loads (SSE4.2's crc32 instruction, native/crc32c.h: ≈ 10× faster),
// unless RDMAJS_PS_KERNELS=js rules the addon out.
import { loadKernels } from './native.js';

/** Below this the N-API crossing costs more than the JS loop saves. */
const NATIVE_MIN_BYTES = 512;

let native: ((b: Uint8Array, start: number, end: number, crc: number) => number) | null | undefined;

function nativeCrc(): typeof native {
  if (native === undefined) {
    try {
      native = process.env.RDMAJS_PS_KERNELS === 'js' ? null : loadKernels().crc32c;
    } catch {
      native = null;
    }
  }
  return native;
}
const T = new Uint32Array(8 * 256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  T[n] = c >>> 0;
}
for (let n = 0; n < 256; n++) {
  for (let t = 1; t < 8; t++) {
    const prev = T[(t - 1) * 256 + n] as number;
    T[t * 256 + n] = ((prev >>> 8) ^ (T[prev & 0xff] as number)) >>> 0;
  }
}

/** Continues `crc` (the value a previous call returned, 0 to start) over `bytes`. */
export function crc32c(bytes: Uint8Array, crc = 0): number {
  return crc32cRange(bytes, 0, bytes.length, crc);
}

/** crc32c of `bytes[start, end)` without a subarray view (integers, 0 ≤ start ≤ end ≤ length). */
export function crc32cRange(bytes: Uint8Array, start: number, end: number, crc = 0): number {
  if (end - start >= NATIVE_MIN_BYTES) {
    const f = nativeCrc();
    if (f) return f(bytes, start, end, crc);
  }
  return crc32cJs(bytes, start, end, crc);
}

/** The JS implementation (also the reference the native one is tested against). */
export function crc32cJs(bytes: Uint8Array, start: number, end: number, crc = 0): number {
  let c = ~crc >>> 0;
  let i = start;
  const n = end;
  const end8 = n - ((n - start) % 8);
  for (; i < end8; i += 8) {
    const a =
      (c ^
        ((bytes[i] as number) |
          ((bytes[i + 1] as number) << 8) |
          ((bytes[i + 2] as number) << 16) |
          ((bytes[i + 3] as number) << 24))) >>>
      0;
    c =
      (T[7 * 256 + (a & 0xff)] as number) ^
      (T[6 * 256 + ((a >>> 8) & 0xff)] as number) ^
      (T[5 * 256 + ((a >>> 16) & 0xff)] as number) ^
      (T[4 * 256 + (a >>> 24)] as number) ^
      (T[3 * 256 + (bytes[i + 4] as number)] as number) ^
      (T[2 * 256 + (bytes[i + 5] as number)] as number) ^
      (T[256 + (bytes[i + 6] as number)] as number) ^
      (T[bytes[i + 7] as number] as number);
  }
  for (; i < n; i++) c = (c >>> 8) ^ (T[(c ^ (bytes[i] as number)) & 0xff] as number);
  return ~c >>> 0;
}
