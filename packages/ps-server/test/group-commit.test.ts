import * as fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PsError } from '../src/index.js';
import { KIND_DENSE, KIND_SPARSE } from '../src/internal/record.js';
import {
  fsLogWriter,
  type LogWriter,
  listSegments,
  PushLog,
  type PushLogOptions,
  scanSegment,
} from '../src/PushLog.js';
import { HeldWriter } from './heldWriter.js';
import { tmpDir } from './helpers.js';

const turn = () => new Promise<void>((r) => setImmediate(r));

function appendSparse(log: PushLog, lsn: number, dim = 4): Promise<void> {
  const k32 = Uint32Array.of(lsn, 0, lsn + 1, 7);
  const grads = new Float32Array(2 * dim).fill(lsn / 8);
  return log.append(lsn, 1_000 + lsn, lsn, KIND_SPARSE, 'writer', 'emb', k32, grads);
}

async function readLog(dir: string): Promise<number[]> {
  const lsns: number[] = [];
  const segs = await listSegments(dir);
  for (const [i, s] of segs.entries()) {
    const r = scanSegment(fs.readFileSync(s.file), s.file, i === segs.length - 1, s.start);
    lsns.push(...r.records.map((x) => x.lsn));
  }
  return lsns;
}

function open(options: PushLogOptions, writer: LogWriter = fsLogWriter) {
  const dir = tmpDir('ps-group-');
  return { dir, log: new PushLog(dir, 0, options, writer) };
}

describe('push log group commit', () => {
  it('concurrent_pushes_share_one_sync_and_each_is_acked_only_after_its_sync', async () => {
    const w = new HeldWriter();
    const { dir, log } = open({ policy: 'fsync' }, w);
    const acked: number[] = [];
    const ack = (lsn: number) => () => {
      // The write + sync that covers this record has completed before its ack.
      expect(w.synced).toBeGreaterThanOrEqual(lsn);
      acked.push(lsn);
    };
    // Ten pushes in one turn: one group.
    const first = Array.from({ length: 10 }, (_, i) => appendSparse(log, i + 1).then(ack(i + 1)));
    await w.calledTimes(1);
    expect(w.calls[0]?.lsns).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // Five more while that write is held: they wait for the next group, not this one.
    const second = Array.from({ length: 5 }, (_, i) => appendSparse(log, i + 11).then(ack(i + 11)));
    for (let i = 0; i < 5; i++) await turn();
    expect(w.calls.length).toBe(1);
    expect(acked).toEqual([]);
    expect(log.durableLsn).toBe(0);
    w.calls[0]?.release();
    await Promise.all(first);
    expect(acked).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    await w.calledTimes(2);
    expect(w.calls[1]?.lsns).toEqual([11, 12, 13, 14, 15]);
    for (let i = 0; i < 5; i++) await turn();
    expect(acked.length).toBe(10);
    w.calls[1]?.release();
    await Promise.all(second);
    expect(acked.length).toBe(15);
    expect(log.groupsWritten).toBe(2);
    expect(log.durableLsn).toBe(15);
    await log.close();
    expect(await readLog(dir)).toEqual(Array.from({ length: 15 }, (_, i) => i + 1));
  });

  it('a_group_is_bounded_in_records_and_bytes', async () => {
    const w = new HeldWriter();
    const { dir, log } = open({ policy: 'fsync', maxGroupRecords: 4 }, w);
    const acks = Array.from({ length: 10 }, (_, i) => appendSparse(log, i + 1));
    for (let n = 1; n <= 3; n++) {
      await w.calledTimes(n);
      w.calls[n - 1]?.release();
    }
    await Promise.all(acks);
    expect(w.calls.map((c) => c.lsns.length)).toEqual([4, 4, 2]);
    await log.close();
    expect(await readLog(dir)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));

    // Records of 16 + 40 + 9 + 7 + 16 + 512·4 bytes (dim 256): three fit 8 KiB, a fourth not.
    const w2 = new HeldWriter();
    const b = open({ policy: 'fsync', maxGroupBytes: 8192 }, w2);
    const acks2 = Array.from({ length: 7 }, (_, i) => appendSparse(b.log, i + 1, 256));
    for (let n = 1; n <= 3; n++) {
      await w2.calledTimes(n);
      w2.calls[n - 1]?.release();
    }
    await Promise.all(acks2);
    expect(w2.calls.map((c) => c.lsns)).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    // A record larger than the bound goes alone.
    const big = b.log.append(
      8,
      0,
      8,
      KIND_DENSE,
      'w',
      'd',
      new Uint32Array(0),
      new Float32Array(4096),
    );
    await w2.calledTimes(4);
    expect(w2.calls[3]?.lsns).toEqual([8]);
    w2.calls[3]?.release();
    await big;
    await b.log.close();
    expect(await readLog(b.dir)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it('a_sync_that_never_completes_fails_the_log_after_its_timeout', async () => {
    const stuck: LogWriter = { dsync: fsLogWriter.dsync, writeDurable: () => {} };
    const { log } = open({ policy: 'fsync', syncTimeoutMs: 30 }, stuck);
    const err = await appendSparse(log, 1).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PsError);
    expect((err as PsError).code).toBe('ERR_PS_IO');
    await expect(appendSparse(log, 2)).rejects.toMatchObject({ code: 'ERR_PS_IO' });
    await log.close();
  });

  it('staging_blocks_are_reused_so_a_steady_stream_allocates_none', async () => {
    const dir = tmpDir('ps-group-');
    const seen = new Set<ArrayBufferLike>();
    const watching: LogWriter = {
      dsync: fsLogWriter.dsync,
      writeDurable(fd, bufs, done, abandoned) {
        for (const b of bufs) seen.add(b.buffer);
        fsLogWriter.writeDurable(fd, bufs, done, abandoned);
      },
    };
    const log = new PushLog(dir, 0, {}, watching);
    for (let round = 0; round < 20; round++)
      await Promise.all(Array.from({ length: 8 }, (_, i) => appendSparse(log, round * 8 + i + 1)));
    expect(log.groupsWritten).toBe(20);
    expect(seen.size).toBe(1);
    await log.close();
    expect((await readLog(dir)).length).toBe(160);
  });
});
