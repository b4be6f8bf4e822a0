import { fsLogWriter, type LogWriter, scanSegment } from '../src/PushLog.js';

/** One held call: what it wrote, on which fd, and how to let it go to the real writer. */
export interface HeldCall {
  fd: number;
  lsns: number[];
  /** Runs the real write + sync; `beforeDone` runs just before the log hears of it. */
  release: (beforeDone?: (err: Error | null) => void) => void;
}

/** The real writer, each call held until the test releases it; records what each call wrote. */
export class HeldWriter implements LogWriter {
  readonly dsync = fsLogWriter.dsync;
  /** Highest lsn whose write + sync has completed (set before the log hears of it). */
  synced = 0;
  readonly calls: HeldCall[] = [];
  #arrived: (() => void) | null = null;

  writeDurable(
    fd: number,
    bufs: Uint8Array[],
    done: (err: Error | null) => void,
    abandoned: () => boolean,
  ): void {
    const lsns = scanSegment(Buffer.concat(bufs), 'group', false, lsnOf(bufs)).records.map(
      (r) => r.lsn,
    );
    this.calls.push({
      fd,
      lsns,
      release: (beforeDone) =>
        fsLogWriter.writeDurable(
          fd,
          bufs,
          (err) => {
            if (err === null) this.synced = Math.max(this.synced, ...lsns);
            beforeDone?.(err);
            done(err);
          },
          abandoned,
        ),
    });
    this.#arrived?.();
  }

  /** Resolves once `n` calls have arrived. */
  async calledTimes(n: number): Promise<void> {
    while (this.calls.length < n) await new Promise<void>((r) => (this.#arrived = r));
  }
}

/** The lsn of a group's first record (body offset 16, f64). */
function lsnOf(bufs: Uint8Array[]): number {
  const first = bufs[0] as Uint8Array;
  return new DataView(first.buffer, first.byteOffset).getFloat64(16, true);
}
