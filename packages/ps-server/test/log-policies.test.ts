import * as fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ParameterStore, PsError, type SparseTableConfig } from '../src/index.js';
import { bits, keys, tmpDir } from './helpers.js';

const tables: SparseTableConfig[] = [{ name: 't', dim: 4, optimizer: { kind: 'adam' } }];

async function run(policy: 'fsync' | 'group' | 'none'): Promise<void> {
  const dir = tmpDir();
  const s = await ParameterStore.open({
    dir,
    tables,
    log: { policy, groupBytes: 1 << 16, groupDelayMs: 1 },
  });
  // Many pushes in flight at once: group commit shares syncs, every promise resolves.
  const acks = Array.from({ length: 50 }, (_, i) =>
    s.push('t', keys(i % 5, 100 + i), new Float32Array(8).fill(i / 10), { session: 'a', seq: i }),
  );
  const results = await Promise.all(acks);
  expect(results.every((r) => r.applied)).toBe(true);
  const want = new Float32Array(4 * 5);
  s.pullInto('t', keys(0, 1, 2, 3, 4), want);
  await s.close();
  const r = await ParameterStore.open({ dir, tables, log: { policy } });
  expect(r.restoreReport.replayed).toBe(50);
  const got = new Float32Array(4 * 5);
  r.pullInto('t', keys(0, 1, 2, 3, 4), got);
  expect(bits(got)).toEqual(bits(want));
  expect(r.sessionSeq('a')).toBe(49);
  await r.close();
}

describe('log policies', () => {
  it('fsync_group_and_none_all_restore_every_resolved_push', async () => {
    await run('fsync');
    await run('group');
    await run('none');
  });

  it('a_duplicate_resolves_only_after_the_original_is_durable', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({
      dir,
      tables,
      log: { policy: 'group', groupDelayMs: 5, groupBytes: 1 << 30 },
    });
    const order: string[] = [];
    const first = s
      .push('t', keys(1), new Float32Array(4), { session: 'a', seq: 1 })
      .then(() => order.push('original'));
    const dup = s.push('t', keys(1), new Float32Array(4), { session: 'a', seq: 1 }).then((r) => {
      order.push('duplicate');
      expect(r.duplicate).toBe(true);
    });
    await Promise.all([first, dup]);
    expect(order).toEqual(['original', 'duplicate']);
    await s.close();
  });

  it('pushNow_answers_in_the_call_without_a_log_and_with_a_promise_of_the_append_with_one', async () => {
    const mem = new ParameterStore({ tables });
    const now = mem.pushNow('t', keys(1), new Float32Array(4).fill(1), { session: 'a', seq: 1 });
    expect(now).toEqual({ applied: true, duplicate: false, rows: 1, dropped: 0 });
    // A duplicate is known durable at once too.
    expect(mem.pushNow('t', keys(1), new Float32Array(4), { session: 'a', seq: 1 })).toEqual({
      applied: false,
      duplicate: true,
      rows: 0,
      dropped: 0,
    });
    await mem.close();
    const dir = tmpDir();
    const logged = await ParameterStore.open({ dir, tables, log: { policy: 'group' } });
    const later = logged.pushNow('t', keys(1), new Float32Array(4), { session: 'a', seq: 1 });
    expect(later).toBeInstanceOf(Promise);
    expect(await later).toMatchObject({ applied: true, rows: 1 });
    await logged.close();
  });

  it('a_log_write_failure_rejects_the_push_with_ERR_PS_IO_and_fails_the_store', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables });
    fs.rmSync(dir, { recursive: true, force: true });
    const e = await s
      .push('t', keys(1), new Float32Array(4), { session: 'a', seq: 1 })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PsError);
    expect((e as PsError).code).toBe('ERR_PS_IO');
    expect(s.state).toBe('failed');
    expect(() => s.pullInto('t', keys(1), new Float32Array(4))).toThrow(
      expect.objectContaining({ code: 'ERR_PS_CLOSED' }),
    );
    await s.close();
    expect(s.state).toBe('closed');
  });

  it('close_during_a_snapshot_waits_for_it', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({ dir, tables });
    await s.push('t', keys(1, 2, 3), new Float32Array(12).fill(1), { session: 'a', seq: 1 });
    const snap = s.snapshot();
    await s.close();
    const info = await snap;
    expect(fs.existsSync(info.file)).toBe(true);
    expect(() => s.snapshot()).toThrow(expect.objectContaining({ code: 'ERR_PS_CLOSED' }));
  });
});
