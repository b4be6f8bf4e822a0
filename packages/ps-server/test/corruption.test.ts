import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ParameterStore,
  PsCorruptError,
  PsError,
  PsNoValidSnapshotError,
  type SparseTableConfig,
} from '../src/index.js';
import { bits, tmpDir } from './helpers.js';

const tables: SparseTableConfig[] = [
  { name: 't', dim: 2, optimizer: { kind: 'adagrad', lr: 0.5 } },
];
const dense = [{ name: 'd', shape: [3], optimizer: { kind: 'adam' as const } }];
const KEYS = BigUint64Array.of(1n, 2n, 3n, 1n << 40n);

async function pushN(s: ParameterStore, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) {
    const ks = BigUint64Array.of(BigInt(i % 3) + 1n, 1n << 40n);
    await s.push('t', ks, Float32Array.of(i, 1, -i, 2), { session: 'w', seq: i });
  }
}

function dump(s: ParameterStore): Uint32Array {
  const o = new Float32Array(KEYS.length * 2);
  s.pullInto('t', KEYS, o);
  return bits(o);
}

async function referenceAfter(n: number): Promise<Uint32Array> {
  const s = new ParameterStore({ tables, dense });
  await pushN(s, 0, n);
  return dump(s);
}

function copyDir(src: string): string {
  const dst = tmpDir('ps-c-');
  for (const n of fs.readdirSync(src)) fs.copyFileSync(path.join(src, n), path.join(dst, n));
  return dst;
}

async function openError(dir: string, log: boolean): Promise<unknown> {
  try {
    const s = await ParameterStore.open({
      dir,
      tables,
      dense,
      log: log ? { policy: 'none' } : false,
    });
    await s.close();
    return null;
  } catch (e) {
    return e;
  }
}

describe('corrupt snapshots are detected', () => {
  it('every_flipped_byte_and_every_truncation_of_a_snapshot_is_reported_with_file_and_offset', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables, dense, log: false });
    await pushN(s, 0, 4);
    await s.pushDense('d', Float32Array.of(1, 2, 3), { session: 'w', seq: 99 });
    const info = await s.snapshot();
    await s.close();
    const good = fs.readFileSync(info.file);
    const headerLen = 8 + Number(good.readBigUInt64LE(0));
    const classes = { length: 0, header: 0, metadata: 0, data: 0 };
    const metaStart = good.indexOf('"__metadata__"');
    const metaEnd = good.indexOf('}', good.indexOf('"header_crc32c"'));
    const work = tmpDir('ps-f-');
    const file = path.join(work, path.basename(info.file));
    const check = async (bytes: Buffer) => {
      fs.writeFileSync(file, bytes);
      const e = await openError(work, false);
      expect(e).toBeInstanceOf(PsNoValidSnapshotError);
      const inner = (e as PsNoValidSnapshotError).errors[0];
      expect(inner).toBeInstanceOf(PsCorruptError);
      expect((inner as PsCorruptError).file).toBe(file);
      expect((inner as PsCorruptError).offset).toBeGreaterThanOrEqual(0);
      expect((inner as PsCorruptError).offset).toBeLessThanOrEqual(bytes.length);
    };
    for (let pos = 0; pos < good.length; pos++) {
      const bad = Buffer.from(good);
      bad[pos] = (bad[pos] as number) ^ (1 << (pos % 8));
      await check(bad);
      if (pos < 8) classes.length++;
      else if (pos >= metaStart && pos <= metaEnd) classes.metadata++;
      else if (pos < headerLen) classes.header++;
      else classes.data++;
    }
    for (let len = 0; len < good.length; len += len < 16 ? 1 : 5)
      await check(good.subarray(0, len));
    expect(Object.values(classes).every((n) => n > 0)).toBe(true);
  });

  it('a_bad_newest_snapshot_falls_back_to_the_older_one_plus_the_log', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables, dense, log: { policy: 'fsync' } });
    await pushN(s, 0, 3);
    await s.snapshot();
    await pushN(s, 3, 6);
    const newest = await s.snapshot();
    await pushN(s, 6, 8);
    await s.close();
    const buf = fs.readFileSync(newest.file);
    buf[buf.length - 3] = (buf[buf.length - 3] as number) ^ 0x10;
    fs.writeFileSync(newest.file, buf);
    const r = await ParameterStore.open({ dir, tables, dense });
    expect(r.restoreReport.snapshot).not.toBe(newest.file);
    expect(r.restoreReport.skipped).toHaveLength(1);
    expect((r.restoreReport.skipped[0] as PsCorruptError).file).toBe(newest.file);
    expect(r.restoreReport.replayed).toBe(5);
    expect(dump(r)).toEqual(await referenceAfter(8));
    await r.close();
  });

  it('a_snapshot_with_another_configuration_is_refused', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables, dense, log: false });
    await pushN(s, 0, 2);
    await s.snapshot();
    await s.close();
    const e = await ParameterStore.open({
      dir,
      tables: [{ ...tables[0], optimizer: { kind: 'adagrad', lr: 0.4 } } as SparseTableConfig],
      dense,
      log: false,
    }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PsError);
    expect((e as PsError).code).toBe('ERR_PS_CONFIG_MISMATCH');
  });
});

describe('corrupt and torn logs', () => {
  it('flips_anywhere_but_the_last_record_are_corruption_naming_the_record_offset', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables, dense, log: { policy: 'none' } });
    await pushN(s, 0, 5);
    await s.close();
    const seg = fs.readdirSync(dir).find((n) => n.endsWith('.seg')) as string;
    const good = fs.readFileSync(path.join(dir, seg));
    const recLen = good.length / 5;
    expect(Number.isInteger(recLen)).toBe(true);
    const ref4 = await referenceAfter(4);
    for (let pos = 0; pos < good.length; pos++) {
      const w = copyDir(dir);
      const bad = Buffer.from(good);
      bad[pos] = (bad[pos] as number) ^ (1 << (pos % 8));
      fs.writeFileSync(path.join(w, seg), bad);
      const rec = Math.floor(pos / recLen);
      // A bad magic, length or header CRC (bytes 0–11) is corruption anywhere (a torn write leaves a prefix, never wrong
      // bytes); a bad body is a torn write only in the file's final record.
      if (rec < 4 || pos - rec * recLen < 12) {
        const e = await openError(w, true);
        expect(e).toBeInstanceOf(PsCorruptError);
        expect((e as PsCorruptError).file).toBe(path.join(w, seg));
        expect((e as PsCorruptError).offset).toBe(rec * recLen);
      } else {
        // The last record: a flip there is indistinguishable from a torn write — dropped, reported.
        const r = await ParameterStore.open({ dir: w, tables, dense, log: { policy: 'none' } });
        expect(r.restoreReport.tornTail).toEqual({ file: path.join(w, seg), offset: 4 * recLen });
        expect(dump(r)).toEqual(ref4);
        await r.close();
      }
      fs.rmSync(w, { recursive: true, force: true });
    }
  });

  it('truncation_at_every_byte_keeps_exactly_the_whole_records', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables, dense, log: { policy: 'fsync' } });
    await pushN(s, 0, 4);
    await s.close();
    const seg = fs.readdirSync(dir).find((n) => n.endsWith('.seg')) as string;
    const good = fs.readFileSync(path.join(dir, seg));
    const recLen = good.length / 4;
    const refs = await Promise.all([0, 1, 2, 3, 4, 5].map(referenceAfter));
    for (
      let len = 0;
      len <= good.length;
      len += len % recLen < 17 || len % recLen > recLen - 2 ? 1 : 6
    ) {
      const w = copyDir(dir);
      fs.writeFileSync(path.join(w, seg), good.subarray(0, len));
      const r = await ParameterStore.open({ dir: w, tables, dense, log: { policy: 'fsync' } });
      const whole = Math.floor(len / recLen);
      expect(dump(r)).toEqual(refs[whole]);
      expect(r.restoreReport.tornTail === null).toBe(len % recLen === 0);
      // and the store keeps going: a new push lands after the surviving records
      await pushN(r, whole, whole + 1);
      await r.close();
      const again = await ParameterStore.open({ dir: w, tables, dense, log: { policy: 'fsync' } });
      expect(dump(again)).toEqual(refs[whole + 1]);
      await again.close();
      fs.rmSync(w, { recursive: true, force: true });
    }
  });

  it('a_missing_middle_segment_is_corruption_naming_the_next_segment', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({
      dir,
      tables,
      dense,
      log: { policy: 'fsync', segmentBytes: 150 },
    });
    await pushN(s, 0, 6);
    await s.close();
    const segs = fs
      .readdirSync(dir)
      .filter((n) => n.endsWith('.seg'))
      .sort();
    expect(segs.length).toBeGreaterThanOrEqual(3);
    fs.rmSync(path.join(dir, segs[1] as string));
    const e = await openError(dir, true);
    expect(e).toBeInstanceOf(PsCorruptError);
    expect((e as PsCorruptError).file).toBe(path.join(dir, segs[2] as string));
    expect((e as PsCorruptError).offset).toBe(0);
  });
});
