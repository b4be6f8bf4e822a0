import { decodeReadDescriptor, RdmaTransport } from '@rdmajs/mux';
import { decodeTableInfoReply, encodeTableInfoRequest, PsMethod } from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsService, parseServiceTables } from '../src/index.js';

// A oneSidedRead table's memory is a read region of the shard's RDMA transport; its
// descriptor reaches RDMA sessions only.
const secret = 'ps-service-readable-secret-0123456';
const serverRdma = new RdmaTransport();
const clientRdma = new RdmaTransport();
let service: PsService;
const tables = {
  tables: [
    { name: 'emb', dim: 4, optimizer: { kind: 'sum' }, budgetBytes: 1 << 20, oneSidedRead: true },
    { name: 'plain', dim: 4, optimizer: { kind: 'sum' } },
  ],
};

beforeAll(async () => {
  service = await PsService.start({
    listen: [{ transport: serverRdma }, { transport: new TcpTransport() }],
    secret,
    shardId: 's0',
    tables: parseServiceTables(tables),
  });
});

afterAll(async () => {
  await service?.close();
  await serverRdma.close();
  await clientRdma.close();
});

const infoOver = async (client: RpcClient) =>
  decodeTableInfoReply(
    await client.call(PsMethod.tableInfo, encodeTableInfoRequest(), { idempotent: true }),
  );

describe('readable tables', () => {
  it('an RDMA session gets the readable table’s descriptor (the region is the table’s memory); TCP gets none', async () => {
    const overRdma = await RpcClient.connect({
      transport: clientRdma,
      port: service.portOf('rdma') as number,
      secret,
    });
    const overTcp = await RpcClient.connect({
      transport: new TcpTransport(),
      port: service.portOf('tcp') as number,
      secret,
    });
    try {
      const r = await infoOver(overRdma);
      const t = await infoOver(overTcp);
      const d = r.tables.find((x) => x.name === 'emb')?.readDescriptor;
      expect(d).toBeInstanceOf(Uint8Array);
      const desc = decodeReadDescriptor(d as Uint8Array);
      const view = service.store.storeView('emb');
      expect(view?.layout.totalBytes).toBe(desc.length);
      expect(r.tables.find((x) => x.name === 'plain')?.readDescriptor).toBeUndefined();
      expect(t.tables.every((x) => x.readDescriptor === undefined)).toBe(true);
    } finally {
      await overRdma.close();
      await overTcp.close();
    }
  });

  it('oneSidedRead needs a numeric budgetBytes', () => {
    const bad = (t: object) => () =>
      parseServiceTables({ tables: [{ name: 'x', dim: 2, optimizer: { kind: 'sum' }, ...t }] });
    expect(bad({ oneSidedRead: true })).toThrow(
      expect.objectContaining({ code: 'ERR_PS_SERVICE_CONFIG' }),
    );
    expect(bad({ oneSidedRead: true, budgetBytes: 'unbounded' })).toThrow(
      expect.objectContaining({ code: 'ERR_PS_SERVICE_CONFIG' }),
    );
    expect(bad({ oneSidedRead: true, budgetBytes: 1 << 16 })).not.toThrow();
  });

  it('a shard without an RDMA listener keeps a readable table on the heap and hands out no descriptor', async () => {
    const s = await PsService.start({
      transport: new TcpTransport(),
      secret,
      shardId: 's1',
      tables: parseServiceTables(tables),
    });
    const c = await RpcClient.connect({ transport: new TcpTransport(), port: s.port, secret });
    try {
      expect(s.store.storeView('emb')).not.toBeNull();
      expect((await infoOver(c)).tables.every((x) => x.readDescriptor === undefined)).toBe(true);
    } finally {
      await c.close();
      await s.close();
    }
  });
});
