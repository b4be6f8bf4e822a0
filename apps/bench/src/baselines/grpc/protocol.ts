import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/** The messages of ps.proto as @grpc/proto-loader hands them over (bytes as Buffer). */
export interface PullRequest {
  table: string;
  keys: Buffer;
}
export interface PullReply {
  dim: number;
  rows: Buffer;
}
export interface PushRequest {
  table: string;
  keys: Buffer;
  grads: Buffer;
  session: string;
  /** uint64 as a decimal string (`longs: String`). */
  seq: string;
}
export interface PushReply {
  applied: boolean;
  duplicate: boolean;
  rows: number;
  dropped: number;
}

// From the sources either way: tsc does not copy it into dist (src/ and dist/ are equally deep).
const protoFile = fileURLToPath(new URL('../../../src/baselines/grpc/ps.proto', import.meta.url));

/** The loaded `rdmajs.bench.ParameterStore` service: its definition and client class. */
export function loadService(): {
  definition: grpc.ServiceDefinition;
  Client: grpc.ServiceClientConstructor;
} {
  const pkg = grpc.loadPackageDefinition(
    loadSync(protoFile, { longs: String, defaults: true, keepCase: true }),
  );
  const Client = (pkg.rdmajs as grpc.GrpcObject).bench as grpc.GrpcObject;
  const ctor = Client.ParameterStore as grpc.ServiceClientConstructor;
  return { definition: ctor.service, Client: ctor };
}

/** Little-endian typed views over wire bytes; copies only when the bytes are misaligned. */
export function u64View(b: Buffer): BigUint64Array {
  if (b.byteOffset % 8 === 0) return new BigUint64Array(b.buffer, b.byteOffset, b.length / 8);
  return new BigUint64Array(Uint8Array.from(b).buffer);
}

export function f32View(b: Buffer): Float32Array {
  if (b.byteOffset % 4 === 0) return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
  return new Float32Array(Uint8Array.from(b).buffer);
}

export function bytesOf(a: BigUint64Array | Float32Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}
