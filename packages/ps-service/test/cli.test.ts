import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'ps-cli-'));
const tables = join(work, 'tables.json');
writeFileSync(
  tables,
  JSON.stringify({ tables: [{ name: 't', dim: 2, optimizer: { kind: 'sum' } }] }),
);
const secretFile = join(work, 'secret');
writeFileSync(secretFile, 'cli-test-secret-0123456789-abcdefghijklmnop\n', { mode: 0o600 });

afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Runs the CLI to its exit (these all fail at start); stdout lines parsed as JSON where they are. */
function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; out: string; logs: Record<string, unknown>[] }> {
  return new Promise((resolve) => {
    const p = spawn(
      process.execPath,
      ['--conditions=@rdmajs/source', '--import', 'tsx', cli, ...args],
      {
        env: { ...process.env, RDMAJS_PS_SECRET: '', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    p.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    p.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const timer = setTimeout(() => p.kill('SIGKILL'), 30_000);
    p.once('exit', (code) => {
      clearTimeout(timer);
      const logs = out.split('\n').flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, unknown>];
        } catch {
          return [];
        }
      });
      resolve({ code, out, logs });
    });
  });
}

describe('rdmajs-ps-server refuses to start, typed, exit 1', () => {
  it('without a secret', async () => {
    const r = await run(['--tables', tables, '--shard-id', 's0']);
    expect(r.code).toBe(1);
    expect(r.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
  });

  it('with a secret on the command line (there is no such option)', async () => {
    const r = await run(['--tables', tables, '--shard-id', 's0', '--secret', 'x'.repeat(20)]);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/unknown option '--secret'/);
  });

  it('with a short secret from the environment', async () => {
    const r = await run(['--tables', tables, '--shard-id', 's0'], { RDMAJS_PS_SECRET: 'short' });
    expect(r.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
  });

  it('with a secret file that group or others can read, naming it', async () => {
    const open = join(work, 'open-secret');
    writeFileSync(open, `${'k'.repeat(40)}\n`, { mode: 0o644 });
    chmodSync(open, 0o644);
    const r = await run(['--tables', tables, '--shard-id', 's0', '--secret-file', open]);
    expect(r.code).toBe(1);
    expect(r.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG', message: expect.stringMatching(/chmod 600/) },
    });
  });

  it('with a table file that fails the schema, naming the field', async () => {
    const bad = join(work, 'bad.json');
    writeFileSync(
      bad,
      JSON.stringify({ tables: [{ name: 't', dim: 9999, optimizer: { kind: 'sum' } }] }),
    );
    const r = await run(['--tables', bad, '--shard-id', 's0', '--secret-file', secretFile]);
    expect(r.code).toBe(1);
    expect(r.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
    const err = r.logs.at(-1)?.error as { message?: string } | undefined;
    expect(String(err?.message)).toMatch(/tables\.0\.dim/);
  });

  it('with a table file that is not JSON, or a bad shard id', async () => {
    const bad = join(work, 'bad.txt');
    writeFileSync(bad, '{ nope');
    const r1 = await run(['--tables', bad, '--shard-id', 's0', '--secret-file', secretFile]);
    expect(r1.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
    const r2 = await run(['--tables', tables, '--shard-id', 'bad id', '--secret-file', secretFile]);
    expect(r2.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
  });

  it('with a port count that does not match --transport, or an unknown transport', async () => {
    const common = ['--tables', tables, '--shard-id', 's0', '--secret-file', secretFile];
    const r1 = await run([...common, '--transport', 'rdma,tcp', '--listen', '127.0.0.1:7001']);
    expect(r1.code).toBe(1);
    expect(r1.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_PS_SERVICE_CONFIG' },
    });
    const r2 = await run([...common, '--transport', 'udp']);
    expect(r2.code).not.toBe(0);
    expect(r2.out).toMatch(/transports are rdma, tcp; got udp/);
  });

  it('with an RDMA tuning flag out of range, a bad --rdma-zero-copy or an unknown --rdma-ablate', async () => {
    const common = ['--tables', tables, '--shard-id', 's0', '--secret-file', secretFile];
    // RdmaTransport's own bound (at most 8 QPs) applies: the start fails with mux's code.
    const r1 = await run([...common, '--transport', 'rdma', '--rdma-qp-pool', '9']);
    expect(r1.code).toBe(1);
    expect(r1.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_MUX_INVALID_ARG' },
    });
    const r2 = await run([...common, '--transport', 'rdma', '--rdma-zero-copy', 'maybe']);
    expect(r2.code).not.toBe(0);
    expect(r2.out).toMatch(/--rdma-zero-copy/);
    const r3 = await run([...common, '--rdma-window-bytes', '0']);
    expect(r3.code).not.toBe(0);
    expect(r3.out).toMatch(/--rdma-window-bytes must be an integer/);
    // Below one 16 MiB arena: RdmaTransport refuses it at start.
    const r4 = await run([...common, '--transport', 'rdma', '--rdma-max-registered', '4096']);
    expect(r4.code).toBe(1);
    expect(r4.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_MUX_INVALID_ARG' },
    });
    // mux names the ablations it knows; the flag passes the list on.
    const r5 = await run([...common, '--transport', 'rdma', '--rdma-ablate', 'credits,recovery']);
    expect(r5.code).toBe(1);
    expect(r5.logs.at(-1)).toMatchObject({
      msg: 'start failed',
      error: { code: 'ERR_MUX_INVALID_ARG' },
    });
  });
});
