import * as grpc from '@grpc/grpc-js';
import { MAX_BATCH_KEYS, type ParameterStore, PsError } from '@rdmajs/ps-server';
import {
  bytesOf,
  f32View,
  type PullReply,
  type PullRequest,
  type PushReply,
  type PushRequest,
  u64View,
} from './protocol.js';

type Fail = { code: grpc.status; details: string };

const invalid = (details: string): Fail => ({ code: grpc.status.INVALID_ARGUMENT, details });

/** The store's typed errors as gRPC statuses: the client sees a code, never a crash. */
function toStatus(err: unknown): Fail {
  if (err instanceof PsError) {
    const code =
      err.code === 'ERR_PS_INVALID_ARG'
        ? grpc.status.INVALID_ARGUMENT
        : err.code === 'ERR_PS_UNKNOWN_TABLE'
          ? grpc.status.NOT_FOUND
          : err.code === 'ERR_PS_CLOSED'
            ? grpc.status.UNAVAILABLE
            : grpc.status.INTERNAL;
    return { code, details: `${err.code}: ${err.message}` };
  }
  return { code: grpc.status.INTERNAL, details: String((err as Error)?.message ?? err) };
}

/** Keys from the wire: a whole number of u64s, at most the store's batch limit. */
function keysOf(b: Buffer): BigUint64Array | Fail {
  if (!Buffer.isBuffer(b) || b.length % 8 !== 0)
    return invalid('keys must be a whole number of u64');
  if (b.length / 8 > MAX_BATCH_KEYS) return invalid(`at most ${MAX_BATCH_KEYS} keys per call`);
  return u64View(b);
}

const isFail = (x: unknown): x is Fail =>
  typeof x === 'object' && x !== null && 'details' in x && 'code' in x;

/**
 * Pull and Push handlers serving `store`. Everything from the peer is validated here (byte
 * lengths, seq) or by the store (table, dims, session); a bad request is an error status.
 */
export function storeHandlers(store: ParameterStore): grpc.UntypedServiceImplementation {
  const dims = new Map<string, number>();
  const dimOf = (table: string) => {
    let d = dims.get(table);
    if (d === undefined) {
      d = store.stats(table).dim;
      dims.set(table, d);
    }
    return d;
  };
  return {
    Pull(
      call: grpc.ServerUnaryCall<PullRequest, PullReply>,
      cb: grpc.sendUnaryData<PullReply>,
    ): void {
      const keys = keysOf(call.request.keys);
      if (isFail(keys)) {
        cb(keys);
        return;
      }
      try {
        const dim = dimOf(call.request.table);
        const rows = new Float32Array(keys.length * dim);
        store.pullInto(call.request.table, keys, rows);
        cb(null, { dim, rows: bytesOf(rows) });
      } catch (err) {
        cb(toStatus(err));
      }
    },
    Push(
      call: grpc.ServerUnaryCall<PushRequest, PushReply>,
      cb: grpc.sendUnaryData<PushReply>,
    ): void {
      const { table, grads, session, seq } = call.request;
      const keys = keysOf(call.request.keys);
      if (isFail(keys)) {
        cb(keys);
        return;
      }
      if (!Buffer.isBuffer(grads) || grads.length % 4 !== 0) {
        cb(invalid('grads must be a whole number of f32'));
        return;
      }
      const seqN = Number(seq);
      if (!Number.isSafeInteger(seqN)) {
        cb(invalid('seq must be a safe integer'));
        return;
      }
      let pending: Promise<{ applied: boolean; duplicate: boolean; rows: number; dropped: number }>;
      try {
        pending = store.push(table, keys, f32View(grads), { session, seq: seqN });
      } catch (err) {
        cb(toStatus(err));
        return;
      }
      pending.then(
        (r) => cb(null, r),
        (err) => cb(toStatus(err)),
      );
    },
  };
}
