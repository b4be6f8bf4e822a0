import { firstNonFinite, type ParameterStore, type PushResult } from '@rdmajs/ps-server';
import {
  decodePullDenseRequest,
  decodePullRequest,
  decodePushDenseRequest,
  decodePushRequest,
  decodeTableInfoRequest,
  encodePushReply,
  encodeTableInfoReply,
  PsMessageKind,
  type PsWireLimits,
  pullDenseReplyInto,
  pullDenseReplyLength,
  pullReplyInto,
  pullReplyLength,
  type ResolvedInit,
  type TableInfo,
} from '@rdmajs/ps-wire';
import type { CallContext, ReplyBuffer } from '@rdmajs/rpc-recovery';
import { PsServiceError } from './errors.js';
import type { NonFinitePolicy } from './ServiceConfig.js';
import type { PushOrigin, WriterAdmission, WriterBindings } from './WriterBindings.js';

/** What the handlers know of the shard's tables. */
export interface ShardCatalog {
  shardId: string;
  maxBatchKeys: number;
  /** Largest reply (bytes) a request may ask for: a pull beyond it is refused before allocating. */
  maxReplyBytes: number;
  tables: Map<string, { dim: number; nonFinite: NonFinitePolicy; init: ResolvedInit }>;
  dense: Map<string, { length: number; nonFinite: NonFinitePolicy }>;
}

export interface HandlerCounters {
  pulls: number;
  pushes: number;
  keysPulled: number;
  keysPushed: number;
  duplicates: number;
  refused: number;
  /**
   * Requests copied to align their keys and floats: 0 while peers send RPC frames of
   * version 2 (payload 8-aligned) over a transport that delivers messages 8-aligned.
   */
  alignmentCopies: number;
}

/**
 * A request that arrives unaligned (it should not: RPC frames pad the method so the payload
 * is 8-aligned) and is up to this size is decoded from a reused 8-aligned copy, so its keys
 * and floats are views of it and nothing is allocated per request; bigger ones get copies of
 * their own (ps-wire), as the copy is not kept.
 */
export const ALIGNED_COPY_MAX_BYTES = 1 << 20;

const refuse = (code: ConstructorParameters<typeof PsServiceError>[0], msg: string): never => {
  throw new PsServiceError(code, msg);
};

/**
 * The request handlers: each validates its whole request against the shard's catalog
 * before the store sees it (so a refused request applies nothing and only its caller
 * hears about it), then runs it. Pull replies are gathered once, by the store, straight into
 * the reply the RPC layer sends (`context.allocateReply`: the connection's registered memory
 * on RDMA, so nothing copies the rows again on this side).
 */
export class RequestHandlers {
  readonly counters: HandlerCounters = {
    pulls: 0,
    pushes: 0,
    keysPulled: 0,
    keysPushed: 0,
    duplicates: 0,
    refused: 0,
    alignmentCopies: 0,
  };
  readonly #store: ParameterStore;
  readonly #catalog: ShardCatalog;
  readonly #limits: PsWireLimits;
  /** Writer ids bound to the sessions that push under them (none: not bound). */
  readonly #writers: WriterBindings | undefined;
  #scratch = new Uint8Array(4096);

  constructor(
    store: ParameterStore,
    catalog: ShardCatalog,
    limits: PsWireLimits,
    writers?: WriterBindings,
  ) {
    this.#store = store;
    this.#catalog = catalog;
    this.#limits = limits;
    this.#writers = writers;
  }

  /** Whether the calling session may push under `writer` (throws the refusal), before the store's push. */
  #admit(writer: string, seq: number, origin: PushOrigin | undefined): WriterAdmission {
    const w = this.#writers;
    return w === undefined || origin === undefined ? 'bound' : w.admit(writer, seq, origin);
  }

  /** Binds `writer` to the calling session once the store took its push. */
  #bind(writer: string, origin: PushOrigin | undefined, admitted: WriterAdmission): void {
    if (admitted !== 'bound') this.#writers?.bind(writer, origin as PushOrigin, admitted);
  }

  /**
   * `payload`, or the same bytes in the reused 8-aligned buffer. Only for handlers that are
   * done with the decoded request when they return (a pull gathers, a push applies and logs
   * it in the call): the next request overwrites the buffer.
   */
  #aligned(payload: Uint8Array): Uint8Array {
    if (payload.byteOffset % 8 === 0) return payload;
    this.counters.alignmentCopies++;
    if (payload.length > ALIGNED_COPY_MAX_BYTES) return payload;
    if (this.#scratch.length < payload.length) {
      this.#scratch = new Uint8Array(
        Math.min(ALIGNED_COPY_MAX_BYTES, Math.max(payload.length, 2 * this.#scratch.length)),
      );
    }
    this.#scratch.set(payload);
    return this.#scratch.subarray(0, payload.length);
  }

  #guard<T>(fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      this.counters.refused++;
      throw err;
    }
  }

  #table(name: string): { dim: number; nonFinite: NonFinitePolicy } {
    return (
      this.#catalog.tables.get(name) ??
      refuse('ERR_PS_REQUEST_UNKNOWN_TABLE', `no table ${name} on shard ${this.#catalog.shardId}`)
    );
  }

  #dense(name: string): { length: number; nonFinite: NonFinitePolicy } {
    return (
      this.#catalog.dense.get(name) ??
      refuse(
        'ERR_PS_REQUEST_UNKNOWN_TABLE',
        `no dense tensor ${name} on shard ${this.#catalog.shardId}`,
      )
    );
  }

  #batch(n: number): void {
    if (n > this.#catalog.maxBatchKeys)
      refuse('ERR_PS_REQUEST_BATCH_TOO_LARGE', `${n} keys > ${this.#catalog.maxBatchKeys}`);
  }

  pull = (payload: Uint8Array, ctx: CallContext): ReplyBuffer => {
    // Inline rather than through #guard: no closure per pull, the most frequent request.
    try {
      const req = decodePullRequest(this.#aligned(payload), this.#limits);
      const t = this.#table(req.table);
      const n = req.keys.length;
      this.#batch(n);
      const size = pullReplyLength(n, t.dim);
      if (size > this.#catalog.maxReplyBytes) {
        refuse(
          'ERR_PS_REQUEST_BATCH_TOO_LARGE',
          `a reply of ${size} bytes > ${this.#catalog.maxReplyBytes}`,
        );
      }
      const reply = ctx.allocateReply(size);
      this.#store.pullInto(req.table, req.keys, pullReplyInto(reply.payload, n, t.dim));
      this.counters.pulls++;
      this.counters.keysPulled += n;
      return reply;
    } catch (err) {
      this.counters.refused++;
      throw err;
    }
  };

  /**
   * The reply itself when the push is durable as it is applied (no log), else a promise of
   * it (the log append): the RPC layer then records and answers it in the same tick.
   */
  push = (payload: Uint8Array, origin?: PushOrigin): Uint8Array | Promise<Uint8Array> => {
    let run: PushResult | Promise<PushResult>;
    // Inline rather than through #guard, and settled by a handler made once: no closure per push.
    try {
      const req = decodePushRequest(this.#aligned(payload), this.#limits);
      const t = this.#table(req.table);
      if (req.dim !== t.dim)
        refuse(
          'ERR_PS_REQUEST_WRONG_DIM',
          `table ${req.table} has dim ${t.dim}, push has ${req.dim}`,
        );
      this.#batch(req.keys.length);
      if (t.nonFinite === 'reject') {
        const i = firstNonFinite(req.grads);
        if (i >= 0)
          refuse(
            'ERR_PS_REQUEST_NON_FINITE',
            `gradient ${i} of the push to ${req.table} is not finite`,
          );
      }
      // Applied in this tick (arrival order is application order); resolves when durable.
      const admitted = this.#admit(req.writer, req.seq, origin);
      run = this.#store.pushNow(req.table, req.keys, req.grads, {
        session: req.writer,
        seq: req.seq,
      });
      this.#bind(req.writer, origin, admitted);
    } catch (err) {
      this.counters.refused++;
      throw err;
    }
    return run instanceof Promise ? run.then(this.#pushed) : this.#pushed(run);
  };

  readonly #pushed = (r: PushResult): Uint8Array => {
    this.counters.pushes++;
    if (r.duplicate) this.counters.duplicates++;
    else this.counters.keysPushed += r.rows;
    return encodePushReply(r, PsMessageKind.PushReply);
  };

  pullDense = (payload: Uint8Array, ctx: CallContext): ReplyBuffer =>
    this.#guard(() => {
      const req = decodePullDenseRequest(payload);
      const d = this.#dense(req.name);
      const reply = ctx.allocateReply(pullDenseReplyLength(d.length));
      this.#store.pullDense(req.name, pullDenseReplyInto(reply.payload, d.length));
      this.counters.pulls++;
      return reply;
    });

  pushDense = (payload: Uint8Array, origin?: PushOrigin): Promise<Uint8Array> => {
    const run = this.#guard(() => {
      const req = decodePushDenseRequest(payload, this.#limits);
      const d = this.#dense(req.name);
      if (req.grads.length !== d.length) {
        refuse(
          'ERR_PS_REQUEST_LENGTH_MISMATCH',
          `dense ${req.name} has ${d.length} elements, push has ${req.grads.length}`,
        );
      }
      if (d.nonFinite === 'reject') {
        const i = firstNonFinite(req.grads);
        if (i >= 0)
          refuse(
            'ERR_PS_REQUEST_NON_FINITE',
            `gradient ${i} of the push to ${req.name} is not finite`,
          );
      }
      const admitted = this.#admit(req.writer, req.seq, origin);
      const pushed = this.#store.pushDense(req.name, req.grads, {
        session: req.writer,
        seq: req.seq,
      });
      this.#bind(req.writer, origin, admitted);
      return pushed;
    });
    return run.then((r) => {
      this.counters.pushes++;
      if (r.duplicate) this.counters.duplicates++;
      return encodePushReply(r, PsMessageKind.PushDenseReply);
    });
  };

  /** With the caller's read descriptors (readable tables, a caller that can READ: see ReadableTables). */
  tableInfo = (payload: Uint8Array, descriptors?: ReadonlyMap<string, Uint8Array>): Uint8Array =>
    this.#guard(() => {
      decodeTableInfoRequest(payload);
      return encodeTableInfoReply(this.info(descriptors));
    });

  info(descriptors?: ReadonlyMap<string, Uint8Array>): TableInfo {
    const c = this.#catalog;
    return {
      shardId: c.shardId,
      maxBatchKeys: c.maxBatchKeys,
      tables: [...c.tables].map(([name, t]) => {
        const readDescriptor = descriptors?.get(name);
        return {
          name,
          dim: t.dim,
          rejectNonFinite: t.nonFinite === 'reject',
          init: t.init,
          ...(readDescriptor === undefined ? {} : { readDescriptor }),
        };
      }),
      dense: [...c.dense].map(([name, d]) => ({
        name,
        length: d.length,
        rejectNonFinite: d.nonFinite === 'reject',
      })),
    };
  }
}
