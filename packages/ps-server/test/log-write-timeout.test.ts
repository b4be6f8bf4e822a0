import * as fs from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import { KIND_SPARSE } from '../src/internal/record.js';
import { fileLogWriter, type LogFileIo, PushLog } from '../src/PushLog.js';
import { HeldWriter } from './heldWriter.js';
import { tmpDir } from './helpers.js';

// The log's own fsyncSync calls, by fd: a failed log must not sync synchronously.
const synced = vi.hoisted(() => [] as number[]);
vi.mock('node:fs', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs')>();
  const fsyncSync = (fd: number): void => {
    synced.push(fd);
    real.fsyncSync(fd);
  };
  return { ...real, fsyncSync, default: { ...real, fsyncSync } };
});

function appendOne(log: PushLog, lsn: number): Promise<void> {
  const k32 = Uint32Array.of(lsn, 0);
  return log.append(lsn, 1_000, lsn, KIND_SPARSE, 'writer', 'emb', k32, new Float32Array(64));
}

function isOpen(fd: number): boolean {
  try {
    fs.fstatSync(fd);
    return true;
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('EBADF');
    return false;
  }
}

/** Real writev that writes only `first` bytes on its first call, holding that callback. */
function shortFirstWrite(first: number) {
  const calls: number[] = [];
  let fd = -1;
  let returned: (() => void) | null = null;
  const wrote = new Promise<void>((r) => (returned = r));
  let deliver: (() => void) | null = null;
  const io: LogFileIo = {
    writev(f, bufs, position, cb) {
      fd = f;
      calls.push(bufs.reduce((n, b) => n + b.length, 0));
      if (calls.length > 1) return fs.writev(f, bufs, position, cb);
      fs.writev(f, [(bufs[0] as Uint8Array).subarray(0, first)], position, (err, n) => {
        deliver = () => cb(err, n);
        returned?.();
      });
    },
    fdatasync: (fd, cb) => fs.fdatasync(fd, cb),
  };
  /** Once the short write has returned, hands its result to the writer (which may go on). */
  const release = async (): Promise<void> => {
    await wrote;
    (deliver as unknown as () => void)();
  };
  return { io, calls, fd: () => fd, release };
}

const heldUntil = async (f: () => boolean) => {
  while (!f()) await new Promise<void>((r) => setTimeout(r, 5));
};

describe('a write that outlives the sync timeout', () => {
  it('close_after_timeout_neither_syncs_nor_closes_the_fd_until_the_write_returns', async () => {
    const w = new HeldWriter();
    const log = new PushLog(tmpDir('ps-timeout-'), 0, { policy: 'fsync', syncTimeoutMs: 30 }, w);
    const ack = appendOne(log, 1);
    await w.calledTimes(1);
    const call = w.calls[0];
    if (call === undefined) throw new Error('no write');
    await expect(ack).rejects.toMatchObject({ code: 'ERR_PS_IO' });
    synced.length = 0;
    // Returns with the write still held: no sync, and the fd stays open under the write.
    await log.close();
    expect(synced).toEqual([]);
    expect(isOpen(call.fd)).toBe(true);
    let openAtCallback: boolean | null = null;
    const returned = new Promise<void>((resolve) =>
      call.release(() => {
        openAtCallback = isOpen(call.fd);
        setImmediate(resolve);
      }),
    );
    await returned;
    expect(openAtCallback).toBe(true);
    // The write's callback closed it (and still without a sync).
    expect(isOpen(call.fd)).toBe(false);
    expect(synced).toEqual([]);
  });

  it('a_short_write_returning_after_the_timeout_does_not_continue', async () => {
    const dir = tmpDir('ps-timeout-');
    const s = shortFirstWrite(10);
    const log = new PushLog(dir, 0, { policy: 'fsync', syncTimeoutMs: 30 }, fileLogWriter(s.io));
    const ack = appendOne(log, 1);
    await expect(ack).rejects.toMatchObject({ code: 'ERR_PS_IO' });
    await heldUntil(() => s.calls.length === 1);
    await log.close();
    // A continuation would be issued from inside the callback release() delivers.
    await s.release();
    expect(s.calls.length).toBe(1);
    const seg = fs.readdirSync(dir).find((n) => n.endsWith('.seg')) as string;
    expect(fs.statSync(`${dir}/${seg}`).size).toBe(10);
  });

  it('a_short_write_returning_in_time_goes_on_to_the_whole_record', async () => {
    const s = shortFirstWrite(10);
    const log = new PushLog(tmpDir('ps-timeout-'), 0, { policy: 'fsync' }, fileLogWriter(s.io));
    const ack = appendOne(log, 1);
    await heldUntil(() => s.calls.length === 1);
    await s.release();
    await ack;
    expect(s.calls.length).toBe(2);
    expect(s.calls[1]).toBe((s.calls[0] as number) - 10);
    // A healthy log syncs its segment on close (and the watch on fsyncSync sees it).
    synced.length = 0;
    await log.close();
    expect(synced).toEqual([s.fd()]);
  });
});
