// Security review F4: a sparse table without a budget grew with every new key pushed (65 536
// per request) until the process ran out of memory. The table file's tables are now bounded
// by default (DEFAULT_TABLE_BYTES worth of rows, new keys beyond dropped); `"unbounded"` has to
// be asked for, and the service warns about it in its structured log at start.
import { decodePushReply, encodePushRequest, PsMethod } from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, expect, it } from 'vitest';
import { DEFAULT_TABLE_BYTES, type LogLevel, PsService, parseServiceTables } from '../src/index.js';

const secret = 'ps-service-test-secret-0123456789';
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('tables of the file are bounded unless "unbounded" is asked for', () => {
  const t = parseServiceTables({
    tables: [
      { name: 'dflt', dim: 8, optimizer: { kind: 'sum' } },
      { name: 'budget', dim: 8, optimizer: { kind: 'sum' }, budgetBytes: 1 << 20 },
      { name: 'open', dim: 8, optimizer: { kind: 'sum' }, budgetBytes: 'unbounded' },
    ],
  });
  const [dflt, budget, open] = t.tables;
  expect(dflt).toMatchObject({ maxRows: Math.floor(DEFAULT_TABLE_BYTES / (12 * 8 + 64)) });
  expect(dflt?.budgetBytes).toBeUndefined();
  expect(budget).toMatchObject({ budgetBytes: 1 << 20 });
  expect(budget?.maxRows).toBeUndefined();
  expect(open?.budgetBytes).toBeUndefined();
  expect(open?.maxRows).toBeUndefined();
  expect(t.unbounded).toEqual(['open']);
  expect(() =>
    parseServiceTables({
      tables: [{ name: 'x', dim: 1, optimizer: { kind: 'sum' }, budgetBytes: 'lots' }],
    }),
  ).toThrow(expect.objectContaining({ code: 'ERR_PS_SERVICE_CONFIG' }));
});

it("the log's group-commit bounds are accepted and checked", () => {
  const log = { policy: 'fsync', maxGroupBytes: 1 << 20, maxGroupRecords: 64, syncTimeoutMs: 5000 };
  expect(parseServiceTables({ tables: [], log }).log).toMatchObject(log);
  for (const bad of [{ maxGroupBytes: 0 }, { maxGroupRecords: 1.5 }, { syncTimeoutMs: -1 }]) {
    expect(() => parseServiceTables({ tables: [], log: bad })).toThrow(
      expect.objectContaining({ code: 'ERR_PS_SERVICE_CONFIG' }),
    );
  }
});

it('an unbounded table is warned about in the structured log at start', async () => {
  const lines: { level: LogLevel; msg: string; fields: Record<string, unknown> | undefined }[] = [];
  const service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'u0',
    logger: { log: (level, msg, fields) => lines.push({ level, msg, fields }) },
    tables: parseServiceTables({
      tables: [
        { name: 'open', dim: 1, optimizer: { kind: 'sum' }, budgetBytes: 'unbounded' },
        { name: 'dflt', dim: 1, optimizer: { kind: 'sum' } },
      ],
    }),
  });
  cleanups.push(() => service.close());
  const warned = lines.filter((l) => l.level === 'warn' && l.msg === 'table unbounded');
  expect(warned.map((l) => l.fields?.table)).toEqual(['open']);
});

it('a client pushing new keys in a loop stops growing the table at its bound', async () => {
  const tables = parseServiceTables({
    tables: [{ name: 'emb', dim: 1, optimizer: { kind: 'sum' } }],
  });
  // The default bound is a gigabyte of rows; the same mechanism with a small bound here.
  (tables.tables[0] as { maxRows?: number }).maxRows = 1000;
  const service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'f0',
    tables,
  });
  cleanups.push(() => service.close());
  const c = await RpcClient.connect({ transport: new TcpTransport(), port: service.port, secret });
  cleanups.push(() => c.close());
  let dropped = 0;
  for (let b = 0; b < 8; b++) {
    const keys = BigUint64Array.from({ length: 512 }, (_, i) => BigInt(b * 512 + i));
    const r = decodePushReply(
      await c.call(
        PsMethod.push,
        encodePushRequest({
          table: 'emb',
          writer: 'wFlood',
          seq: b + 1,
          dim: 1,
          keys,
          grads: new Float32Array(512).fill(1),
        }),
      ),
    );
    dropped += r.dropped;
  }
  expect(dropped).toBe(8 * 512 - 1000);
  expect(service.store.stats('emb').rows).toBe(1000);
});
