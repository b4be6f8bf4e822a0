import { RdmaTransport } from '@rdmajs/mux';
import {
  decodePullReply,
  decodePushReply,
  decodeTableInfoReply,
  encodePullRequest,
  encodePushRequest,
  encodeTableInfoRequest,
  PsMethod,
} from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsService, parseServiceTables } from '../src/index.js';

const secret = 'ps-service-rdma-secret-0123456789';
const serverRdma = new RdmaTransport();
const clientRdma = new RdmaTransport();
let service: PsService;

beforeAll(async () => {
  service = await PsService.start({
    listen: [{ transport: serverRdma }, { transport: new TcpTransport() }],
    secret,
    shardId: 's0',
    tables: parseServiceTables({
      tables: [{ name: 'emb', dim: 4, optimizer: { kind: 'sum' } }],
    }),
  });
});

afterAll(async () => {
  await service?.close();
  await serverRdma.close();
  await clientRdma.close();
});

const pullRows = async (client: RpcClient, keys: bigint[]) =>
  decodePullReply(
    await client.call(
      PsMethod.pull,
      encodePullRequest({ table: 'emb', keys: BigUint64Array.from(keys) }),
      { idempotent: true },
    ),
  ).rows;

describe('one shard listening on RDMA and TCP at once', () => {
  it('reports both listeners, each on its own port', () => {
    const l = service.listeners;
    expect(l.map((x) => x.transport)).toEqual(['rdma', 'tcp']);
    expect(l[0]?.port).toBeGreaterThan(0);
    expect(l[1]?.port).toBeGreaterThan(0);
    expect(l[0]?.port).not.toBe(l[1]?.port);
    expect(service.portOf('rdma')).toBe(l[0]?.port);
    expect(service.portOf('tcp')).toBe(l[1]?.port);
    expect(service.port).toBe(l[0]?.port);
  });

  it('serves the same store to a client on each transport', async () => {
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
      expect(overRdma.stats().transport).toBe('rdma');
      expect(overTcp.stats().transport).toBe('tcp');
      const info = decodeTableInfoReply(
        await overRdma.call(PsMethod.tableInfo, encodeTableInfoRequest(), { idempotent: true }),
      );
      expect(info.tables.map((t) => t.name)).toEqual(['emb']);
      // A push over RDMA is seen by a pull over TCP, and the reverse.
      const push = (client: RpcClient, seq: number, g: number) =>
        client.call(
          PsMethod.push,
          encodePushRequest({
            table: 'emb',
            writer: `w-${client.stats().transport}`,
            seq,
            dim: 4,
            keys: BigUint64Array.of(7n),
            grads: Float32Array.of(g, g, g, g),
          }),
        );
      expect(decodePushReply(await push(overRdma, 1, 1.5)).rows).toBe(1);
      expect([...(await pullRows(overTcp, [7n]))]).toEqual([1.5, 1.5, 1.5, 1.5]);
      expect(decodePushReply(await push(overTcp, 1, 2)).rows).toBe(1);
      expect([...(await pullRows(overRdma, [7n, 8n]))]).toEqual([3.5, 3.5, 3.5, 3.5, 0, 0, 0, 0]);
      expect(service.stats().connections).toBe(2);
      // The RDMA pull's reply was built in registered memory; the TCP one on the heap.
      const registered = (await service.metrics.registeredReplies.get()).values[0]?.value;
      expect(registered).toBe(1);
    } finally {
      await overRdma.close();
      await overTcp.close();
    }
  });

  it('a push arrives 8-aligned on either transport: its keys and gradients are decoded in place, never copied to align them', async () => {
    const clients = [
      await RpcClient.connect({
        transport: clientRdma,
        port: service.portOf('rdma') as number,
        secret,
      }),
      await RpcClient.connect({
        transport: new TcpTransport(),
        port: service.portOf('tcp') as number,
        secret,
      }),
    ];
    try {
      const before = service.stats();
      let pushes = 0;
      for (const client of clients) {
        // Batches of odd sizes (ps-wire pads names to 8 itself: the RPC frame is what aligns).
        for (let w = 1; w <= 8; w++) {
          const n = 2 * w + 1;
          const reply = decodePushReply(
            await client.call(
              PsMethod.push,
              encodePushRequest({
                table: 'emb',
                writer: `aligned-${client.stats().transport}`,
                seq: w,
                dim: 4,
                keys: BigUint64Array.from({ length: n }, (_, i) => BigInt(1000 + i)),
                grads: new Float32Array(4 * n).fill(0.25),
              }),
            ),
          );
          expect(reply).toMatchObject({ applied: true, rows: n });
          pushes++;
        }
        await pullRows(client, [1000n, 1001n, 1002n]);
      }
      const after = service.stats();
      expect(after.pushes - before.pushes).toBe(pushes);
      expect(after.pulls - before.pulls).toBe(2);
      expect(after.alignmentCopies).toBe(0);
    } finally {
      for (const c of clients) await c.close();
    }
  });

  it('refuses a configuration that names no listener, both forms, or two of one transport', async () => {
    const base = {
      secret,
      shardId: 's1',
      tables: parseServiceTables({ tables: [] }),
    };
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 'resolved',
        (e: { code?: string }) => e.code,
      );
    expect(await code(PsService.start(base))).toBe('ERR_PS_SERVICE_CONFIG');
    expect(await code(PsService.start({ ...base, listen: [] }))).toBe('ERR_PS_SERVICE_CONFIG');
    const tcp = new TcpTransport();
    expect(
      await code(PsService.start({ ...base, transport: tcp, listen: [{ transport: tcp }] })),
    ).toBe('ERR_PS_SERVICE_CONFIG');
    expect(
      await code(
        PsService.start({
          ...base,
          listen: [{ transport: tcp }, { transport: new TcpTransport() }],
        }),
      ),
    ).toBe('ERR_PS_SERVICE_CONFIG');
  });

  it('zeroCopyReplies: false builds RDMA replies on the heap (the transport copies them) and serves the same rows', async () => {
    const server = new RdmaTransport();
    const client = new RdmaTransport();
    const copying = await PsService.start({
      transport: server,
      secret,
      shardId: 's2',
      tables: parseServiceTables({ tables: [{ name: 'emb', dim: 4, optimizer: { kind: 'sum' } }] }),
      zeroCopyReplies: false,
    });
    const rpc = await RpcClient.connect({ transport: client, port: copying.port, secret });
    try {
      // One key goes back eager (SEND), 4096 keys × 16 B by rendezvous (READ).
      expect([...(await pullRows(rpc, [1n]))]).toEqual([0, 0, 0, 0]);
      const many = Array.from({ length: 4096 }, (_, i) => BigInt(i + 1));
      expect((await pullRows(rpc, many)).length).toBe(4096 * 4);

      expect(copying.stats().connections).toBe(1);
      const registered = (await copying.metrics.registeredReplies.get()).values[0]?.value ?? 0;
      expect(registered).toBe(0);
    } finally {
      await rpc.close();
      await copying.close();
      server.close();
      client.close();
    }
    const code = await PsService.start({
      transport: new TcpTransport(),
      secret,
      shardId: 's3',
      tables: parseServiceTables({ tables: [] }),
      zeroCopyReplies: 'no' as unknown as boolean,
    }).then(
      () => 'resolved',
      (e: { code?: string }) => e.code,
    );
    expect(code).toBe('ERR_PS_SERVICE_CONFIG');
  });
});
