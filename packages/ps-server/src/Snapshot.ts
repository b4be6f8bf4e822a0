import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import type { DenseTensor } from './DenseTensor.js';
import { PsCorruptError, PsError } from './errors.js';
import { crc32c } from './internal/crc32c.js';
import {
  type Dtype,
  encodeHeader,
  layout,
  parse,
  type TensorEntry,
  type TensorSpec,
} from './internal/safetensors.js';
import { syncDir } from './PushLog.js';
import type { SparseTable, TableCapture } from './SparseTable.js';

export const SNAPSHOT_FORMAT = 'rdmajs-ps-snapshot';
export const SNAPSHOT_VERSION = '1';
const SNAP_RE = /^snap-(\d{16})\.safetensors$/;
const HEADER_CRC_KEY = Buffer.from('"header_crc32c":"');

export function snapshotName(lsn: number): string {
  return `snap-${String(lsn).padStart(16, '0')}.safetensors`;
}

export async function listSnapshots(dir: string): Promise<Array<{ file: string; lsn: number }>> {
  const names = await fsp.readdir(dir);
  return names
    .map((n) => SNAP_RE.exec(n))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ file: path.join(dir, m[0]), lsn: Number(m[1]) }))
    .sort((a, b) => b.lsn - a.lsn);
}

/** What a table needs to be rebuilt, as recorded in the snapshot's metadata. */
export interface TableMeta {
  name: string;
  /** The table's configuration in canonical form (compared with the one given at open). */
  config: unknown;
  rows: number;
  tickCounter: number;
}

export interface DenseMeta {
  name: string;
  config: unknown;
  step: number;
}

/** Everything taken synchronously when a snapshot starts (the pause). */
export interface StoreCapture {
  lsn: number;
  sessions: Record<string, number>;
  tables: Array<{ table: SparseTable; cap: TableCapture; config: unknown }>;
  dense: Array<{
    tensor: DenseTensor;
    values: Float32Array;
    state: Float32Array;
    step: number;
    config: unknown;
  }>;
}

function tableSpecs(t: SparseTable, rows: number): Array<TensorSpec & { perRow: number }> {
  const p = `sparse/${t.name}/`;
  const specs: Array<TensorSpec & { perRow: number }> = [
    { name: `${p}keys`, dtype: 'U64', shape: [rows], perRow: 8 },
    {
      name: `${p}rows`,
      dtype: t.rowDtype === 'f16' ? 'F16' : 'F32',
      shape: [rows, t.dim],
      perRow: t.dim * (t.rowDtype === 'f16' ? 2 : 4),
    },
  ];
  for (const s of t.optimizer.stateNames)
    specs.push({ name: `${p}${s}`, dtype: 'F32', shape: [rows, t.dim], perRow: t.dim * 4 });
  if (t.optimizer.usesSteps)
    specs.push({ name: `${p}steps`, dtype: 'U32', shape: [rows], perRow: 4 });
  if (t.hasLru) specs.push({ name: `${p}lru_tick`, dtype: 'F64', shape: [rows], perRow: 8 });
  if (t.hasTtl) specs.push({ name: `${p}last_push_ms`, dtype: 'F64', shape: [rows], perRow: 8 });
  return specs;
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}

export interface WriteStats {
  file: string;
  bytes: number;
  /** Longest synchronous copy of one chunk while the file was written (copy-on-write). */
  maxChunkCopyMs: number;
}

/**
 * Writes a capture as a safetensors file: temp file, positional writes chunk by chunk (the
 * store keeps serving between them), header with per-tensor CRC-32C last, fsync, rename,
 * fsync of the directory.
 */
export async function writeSnapshot(dir: string, cap: StoreCapture): Promise<WriteStats> {
  const specs: TensorSpec[] = [];
  for (const { table, cap: tc } of cap.tables) {
    for (const s of tableSpecs(table, tc.rows))
      specs.push({ name: s.name, dtype: s.dtype, shape: s.shape });
    const sk = table.sketchShape;
    if (sk !== null)
      specs.push({
        name: `sparse/${table.name}/admission_sketch`,
        dtype: 'U16',
        shape: [sk.depth, sk.width],
      });
  }
  for (const d of cap.dense) {
    specs.push({ name: `dense/${d.tensor.name}`, dtype: 'F32', shape: [...d.tensor.shape] });
    for (const s of d.tensor.optimizer.stateNames)
      specs.push({ name: `dense/${d.tensor.name}/${s}`, dtype: 'F32', shape: [...d.tensor.shape] });
  }
  const { entries, dataBytes } = layout(specs);
  const byName = new Map(entries.map((e) => [e.name, e]));
  const crcs = new Map<string, number>(entries.map((e) => [e.name, 0]));
  const metadata = (): Record<string, string> => ({
    format: SNAPSHOT_FORMAT,
    version: SNAPSHOT_VERSION,
    lsn: String(cap.lsn),
    sessions: JSON.stringify(cap.sessions),
    tables: JSON.stringify(
      cap.tables.map(
        ({ table, cap: tc, config }) =>
          ({
            name: table.name,
            config,
            rows: tc.rows,
            tickCounter: tc.tickCounter,
          }) satisfies TableMeta,
      ),
    ),
    dense: JSON.stringify(
      cap.dense.map(
        (d) => ({ name: d.tensor.name, config: d.config, step: d.step }) satisfies DenseMeta,
      ),
    ),
    crc32c: JSON.stringify(Object.fromEntries([...crcs].map(([k, v]) => [k, hex(v)]))),
    header_crc32c: '00000000',
  });
  const header0 = encodeHeader(entries, metadata());
  const dataStart = header0.length;
  const file = path.join(dir, snapshotName(cap.lsn));
  const tmp = `${file}.tmp`;
  const fh = await fsp.open(tmp, 'w');
  let maxCopy = 0;
  try {
    const put = async (name: string, bytes: Uint8Array, offset: number) => {
      const e = byName.get(name) as TensorEntry;
      crcs.set(name, crc32c(bytes, crcs.get(name)));
      if (bytes.length > 0) await fh.write(bytes, 0, bytes.length, dataStart + e.begin + offset);
    };
    for (const { table, cap: tc } of cap.tables) {
      const ts = tableSpecs(table, tc.rows);
      let done = 0;
      for (let c = 0; c < tc.chunkCount; c++) {
        const t0 = performance.now();
        const cc = tc.take(c);
        maxCopy = Math.max(maxCopy, performance.now() - t0);
        const parts: Array<Uint8Array | null> = [cc.keys, cc.rows, ...cc.state];
        if (table.optimizer.usesSteps) parts.push(cc.steps);
        if (table.hasLru) parts.push(cc.tick);
        if (table.hasTtl) parts.push(cc.lastMs);
        for (let k = 0; k < ts.length; k++) {
          const s = ts[k] as TensorSpec & { perRow: number };
          await put(s.name, parts[k] as Uint8Array, done * s.perRow);
        }
        done += cc.n;
      }
      if (done !== tc.rows)
        throw new PsError(
          'ERR_PS_IO',
          `table ${table.name}: captured ${done} rows, expected ${tc.rows}`,
        );
      if (tc.sketch !== null)
        await put(
          `sparse/${table.name}/admission_sketch`,
          new Uint8Array(tc.sketch.buffer, tc.sketch.byteOffset, tc.sketch.byteLength),
          0,
        );
    }
    for (const d of cap.dense) {
      await put(
        `dense/${d.tensor.name}`,
        new Uint8Array(d.values.buffer, d.values.byteOffset, d.values.byteLength),
        0,
      );
      const n = d.tensor.length;
      for (let k = 0; k < d.tensor.optimizer.stateNames.length; k++) {
        const st = d.state.subarray(k * n, (k + 1) * n);
        await put(
          `dense/${d.tensor.name}/${d.tensor.optimizer.stateNames[k]}`,
          new Uint8Array(st.buffer, st.byteOffset, st.byteLength),
          0,
        );
      }
    }
    const header = Buffer.from(encodeHeader(entries, metadata()));
    if (header.length !== dataStart)
      throw new PsError('ERR_PS_IO', 'snapshot header changed length');
    const at = header.indexOf(HEADER_CRC_KEY) + HEADER_CRC_KEY.length;
    header.write(hex(crc32c(header)), at, 'latin1');
    await fh.write(header, 0, header.length, 0);
    await fh.sync();
  } catch (err) {
    await fh.close().catch(() => {});
    await fsp.rm(tmp, { force: true });
    throw err instanceof PsError
      ? err
      : new PsError('ERR_PS_IO', `writing snapshot ${tmp} failed`, { cause: err });
  }
  await fh.close();
  await fsp.rename(tmp, file);
  syncDir(dir);
  return { file, bytes: dataStart + dataBytes, maxChunkCopyMs: maxCopy };
}

export interface SnapshotTable {
  meta: TableMeta;
  keys: Uint32Array;
  rows: Float32Array | Uint16Array;
  state: Float32Array[];
  steps: Uint32Array | null;
  tick: Float64Array | null;
  lastMs: Float64Array | null;
  sketch: Uint16Array | null;
}

export interface SnapshotData {
  file: string;
  lsn: number;
  sessions: Record<string, number>;
  tables: Map<string, SnapshotTable>;
  dense: Map<string, { meta: DenseMeta; values: Float32Array; state: Float32Array[] }>;
  tensorNames: string[];
}

function jsonMeta<T>(file: string, md: Record<string, string>, key: string): T {
  const s = md[key];
  if (s === undefined) throw new PsCorruptError(file, 8, `__metadata__.${key} is missing`);
  try {
    return JSON.parse(s) as T;
  } catch (err) {
    throw new PsCorruptError(file, 8, `__metadata__.${key} is not valid JSON`, { cause: err });
  }
}

/** Reads and fully validates a snapshot file (structure, header CRC, every tensor's CRC). */
export async function readSnapshot(file: string): Promise<SnapshotData> {
  let buf: Buffer;
  try {
    buf = await fsp.readFile(file);
  } catch (err) {
    throw new PsError('ERR_PS_IO', `cannot read ${file}`, { cause: err });
  }
  const p = parse(buf, file);
  const md = p.metadata;
  if (md.format !== SNAPSHOT_FORMAT)
    throw new PsCorruptError(file, 8, `__metadata__.format is ${String(md.format)}`);
  if (md.version !== SNAPSHOT_VERSION)
    throw new PsCorruptError(file, 8, `unsupported snapshot version ${String(md.version)}`);
  const header = Buffer.from(buf.subarray(0, p.dataStart));
  const at = header.indexOf(HEADER_CRC_KEY);
  if (at < 0) throw new PsCorruptError(file, 8, 'header_crc32c is missing');
  const hAt = at + HEADER_CRC_KEY.length;
  const want = header.toString('latin1', hAt, hAt + 8);
  header.write('00000000', hAt, 'latin1');
  if (hex(crc32c(header)) !== want) throw new PsCorruptError(file, hAt, 'header checksum mismatch');
  const crcs = jsonMeta<Record<string, string>>(file, md, 'crc32c');
  for (const e of p.tensors.values()) {
    const got = crc32c(buf.subarray(p.dataStart + e.begin, p.dataStart + e.end));
    if (crcs[e.name] !== hex(got))
      throw new PsCorruptError(file, p.dataStart + e.begin, `tensor ${e.name} checksum mismatch`);
  }
  const lsn = Number(md.lsn);
  if (!Number.isSafeInteger(lsn) || lsn < 0) throw new PsCorruptError(file, 8, 'bad lsn');
  const view = <T>(name: string, dtype: Dtype, shape: number[], make: (b: ArrayBuffer) => T): T => {
    const e = p.tensors.get(name);
    if (e === undefined) throw new PsCorruptError(file, 8, `tensor ${name} is missing`);
    if (
      e.dtype !== dtype ||
      e.shape.length !== shape.length ||
      e.shape.some((d, i) => d !== shape[i])
    )
      throw new PsCorruptError(
        file,
        8,
        `tensor ${name} is ${e.dtype}${JSON.stringify(e.shape)}, expected ${dtype}${JSON.stringify(shape)}`,
      );
    // A copy: tensor data need not be aligned for typed-array views.
    return make(
      buf.buffer.slice(
        buf.byteOffset + p.dataStart + e.begin,
        buf.byteOffset + p.dataStart + e.end,
      ) as ArrayBuffer,
    );
  };
  const tables = new Map<string, SnapshotTable>();
  for (const meta of jsonMeta<TableMeta[]>(file, md, 'tables')) {
    const c = meta.config as {
      dim: number;
      rowDtype: 'f32' | 'f16';
      stateNames: string[];
      usesSteps: boolean;
      lru: boolean;
      ttl: boolean;
      sketch: { width: number; depth: number } | null;
    };
    const pre = `sparse/${meta.name}/`;
    const n = meta.rows;
    tables.set(meta.name, {
      meta,
      keys: view(`${pre}keys`, 'U64', [n], (b) => new Uint32Array(b)),
      rows:
        c.rowDtype === 'f16'
          ? view(`${pre}rows`, 'F16', [n, c.dim], (b) => new Uint16Array(b))
          : view(`${pre}rows`, 'F32', [n, c.dim], (b) => new Float32Array(b)),
      state: c.stateNames.map((s) =>
        view(`${pre}${s}`, 'F32', [n, c.dim], (b) => new Float32Array(b)),
      ),
      steps: c.usesSteps ? view(`${pre}steps`, 'U32', [n], (b) => new Uint32Array(b)) : null,
      tick: c.lru ? view(`${pre}lru_tick`, 'F64', [n], (b) => new Float64Array(b)) : null,
      lastMs: c.ttl ? view(`${pre}last_push_ms`, 'F64', [n], (b) => new Float64Array(b)) : null,
      sketch: c.sketch
        ? view(
            `${pre}admission_sketch`,
            'U16',
            [c.sketch.depth, c.sketch.width],
            (b) => new Uint16Array(b),
          )
        : null,
    });
  }
  const dense = new Map<string, { meta: DenseMeta; values: Float32Array; state: Float32Array[] }>();
  for (const meta of jsonMeta<DenseMeta[]>(file, md, 'dense')) {
    const c = meta.config as { shape: number[]; stateNames: string[] };
    dense.set(meta.name, {
      meta,
      values: view(`dense/${meta.name}`, 'F32', c.shape, (b) => new Float32Array(b)),
      state: c.stateNames.map((s) =>
        view(`dense/${meta.name}/${s}`, 'F32', c.shape, (b) => new Float32Array(b)),
      ),
    });
  }
  return {
    file,
    lsn,
    sessions: jsonMeta(file, md, 'sessions'),
    tables,
    dense,
    tensorNames: [...p.tensors.keys()],
  };
}
