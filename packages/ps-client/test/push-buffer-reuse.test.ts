import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { encodePushRequest, PsMethod } from '@rdmajs/ps-wire';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { ShardLink } from '../src/ShardLink.js';
import { openLink } from './support/openLink.js';

const secret = 'ps-client-test-secret-0123456789';
let service: PsService;
let link: ShardLink;
const transport = new TcpTransport();

beforeAll(async () => {
  service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'a',
    tables: parseServiceTables({ tables: [{ name: 'emb', dim: 2, optimizer: { kind: 'sum' } }] }),
  });
  link = await openLink(transport, secret, service.port);
});

afterAll(async () => {
  await link?.close();
  await service?.close();
});

const request = (table: string, seq: number) =>
  encodePushRequest({
    table,
    writer: 'w1',
    seq,
    dim: 2,
    keys: BigUint64Array.of(1n, 2n),
    grads: Float32Array.of(1, 2, 3, 4),
  });

it('a push acknowledged after its only send gives its payload back, once; so does one the server refused (it had every byte)', async () => {
  const given: Uint8Array[] = [];
  const give = (b: Uint8Array) => given.push(b);
  const first = request('emb', link.nextSeq());
  await link.push(link.nextSeq(), PsMethod.push, first, 5000, give);
  expect(given).toEqual([first]);
  expect(given[0]).toBe(first);
  // Refused by the server (unknown table): answered, so no session reads it any more.
  const refused = request('nope', link.nextSeq());
  await expect(link.push(link.nextSeq(), PsMethod.push, refused, 5000, give)).rejects.toThrow();
  expect(given).toHaveLength(2);
  expect(given[1]).toBe(refused);
  // Refused by the link before it was queued (seq out of order): handed back at once.
  const early = request('emb', link.nextSeq() + 5);
  await expect(link.push(link.nextSeq() + 5, PsMethod.push, early, 5000, give)).rejects.toThrow(
    /out of order/,
  );
  expect(given[2]).toBe(early);
  // Without a taker nothing is handed anywhere, and the stream goes on.
  await link.push(link.nextSeq(), PsMethod.push, request('emb', link.nextSeq()), 5000);
  expect(given).toHaveLength(3);
  expect(link.stats().resent).toBe(0);
});
