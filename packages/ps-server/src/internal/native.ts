// Loads the kernels addon and explains itself when it cannot.
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PsError } from '../errors.js';
import { checkAbi } from './abi.js';

/** One sparse table's batch kernels over its registered chunk and index arrays. */
export interface NativeTableKernels {
  addChunk(
    rows: Float32Array | Uint16Array,
    state: Float32Array,
    steps: Uint32Array | null,
    lastMs: Float64Array | null,
    /** One-sided readable tables: the chunk's slot meta records (seqs bumped around updates). */
    meta?: Uint32Array | null,
  ): number;
  setIndex(buckets: Int32Array, tags: Uint8Array, old: Int32Array | null, salt: number): void;
  /**
   * Rows of hits into out, zeros for misses; request positions of misses (no row, or expired
   * at nowMs) into miss. Misses, or a K_ code.
   */
  gather(k32: Uint32Array, n: number, out: Float32Array, miss: Int32Array, nowMs: number): number;
  /** Slot per key (-1 without a row). Misses, or a K_ code. */
  lookup(k32: Uint32Array, n: number, slots: Int32Array): number;
  /**
   * Sums duplicates, updates each distinct row once; distinct slots into uniq. Count, or a K_
   * code. scalars: per key step scalars (Adam), else null.
   */
  apply(
    slots: Int32Array,
    n: number,
    grads: Float32Array,
    uniq: Int32Array,
    scalars: Float32Array | null,
  ): number;
  /**
   * The optimizer update of u distinct rows whose dedupe JS did (src[k]: grads offset, or -1
   * for acc[k·dim …]). u, or a K_ code. scalars: per row step scalars (Adam), else null.
   */
  update(
    uniq: Int32Array,
    u: number,
    src: Int32Array,
    grads: Float32Array,
    acc: Float32Array,
    scalars: Float32Array | null,
  ): number;
  clear(): void;
}

interface Addon {
  abi(): Record<string, number>;
  /**
   * Asks for transparent huge pages (madvise MADV_HUGEPAGE) over the 2 MiB-aligned part of a
   * large array's memory, before it is first written. A hint: false where not applied.
   */
  adviseHugePages(a: ArrayBufferView): boolean;
  /** Bytes from the view's first byte to its first ABI.ROW_ALIGN-aligned address. */
  bytesToAlign(a: ArrayBufferView): number;
  /** Index of the first NaN or ±Inf element, or -1. */
  firstNonFinite(f: Float32Array): number;
  /** CRC-32C of b[start, end) continuing crc (native/crc32c.h; src/internal/crc32c.ts). */
  crc32c(b: Uint8Array, start: number, end: number, crc: number): number;
  TableKernels: new (
    dim: number,
    rowDtype: number,
    stateDim: number,
    chunkShift: number,
    usesSteps: boolean,
    kind: number,
    params: Float64Array,
    ttlMs: number,
    /** Saturate weights and state after each update (SparseTableConfig.overflow). */
    saturate: boolean,
  ) => NativeTableKernels;
}

let addon: Addon | undefined;

/**
 * The kernels a table runs: RDMAJS_PS_KERNELS=js forces the JS reference kernels on every
 * table (to rule the addon out without a config change); otherwise the table's choice,
 * native by default.
 */
export function kernelsChoice(configured: 'native' | 'js' | undefined): 'native' | 'js' {
  const env = process.env.RDMAJS_PS_KERNELS;
  if (env !== undefined && env !== '' && env !== 'js' && env !== 'native')
    throw new PsError(
      'ERR_PS_INVALID_ARG',
      `RDMAJS_PS_KERNELS must be 'js' or 'native', got ${JSON.stringify(env)}`,
    );
  return env === 'js' ? 'js' : (configured ?? 'native');
}

const packageRoot = dirname(dirname(dirname(fileURLToPath(import.meta.url))));

/**
 * The addon, loaded once. Throws ERR_PS_NATIVE_LOAD listing what was tried. `root` (the
 * package directory) is for tests of the failure path; only the package's own is cached.
 */
export function loadKernels(root = packageRoot): Addon {
  if (addon && root === packageRoot) return addon;
  const require = createRequire(import.meta.url);
  const tried = [
    join(root, 'build', 'Release', 'rdmajs_ps_kernels.node'),
    join(root, 'build', 'Debug', 'rdmajs_ps_kernels.node'),
  ];
  const failures: string[] = [];
  for (const path of tried) {
    try {
      const loaded = require(path) as Addon;
      checkAbi(typeof loaded.abi === 'function' ? loaded.abi() : {}, path);
      if (root === packageRoot) addon = loaded;
      return loaded;
    } catch (err) {
      failures.push(`${path}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new PsError(
    'ERR_PS_NATIVE_LOAD',
    `@rdmajs/ps-server: no kernels addon loads on ${platform()}-${arch()} (Node ${process.version}). ` +
      `Tried:\n  ${failures.join('\n  ')}\nBuild it with \`pnpm build\` (needs python3, make and g++), ` +
      "or configure the table with kernels: 'js'.",
  );
}
