import * as grpc from '@grpc/grpc-js';
import { bytesOf, f32View, loadService, type PullReply, type PushReply } from './protocol.js';

const DEADLINE_MS = 30_000;

type Unary<Req, Res> = (
  req: Req,
  opts: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, res?: Res) => void,
) => void;

/** A typed error of the gRPC baseline: the status the server (or channel) gave. */
export class GrpcStoreError extends Error {
  readonly code = 'ERR_BENCH_GRPC';
  constructor(
    message: string,
    readonly status: grpc.status | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'GrpcStoreError';
  }
}

/** One channel to the gRPC parameter store; unary Pull and Push, each with a deadline. */
export class GrpcStoreClient {
  readonly #client: grpc.Client;

  constructor(port: number) {
    const { Client } = loadService();
    this.#client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 256 << 20,
      'grpc.max_send_message_length': 256 << 20,
    });
  }

  #unary<Req, Res>(method: 'Pull' | 'Push', req: Req): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      const fn = (this.#client as unknown as Record<string, Unary<Req, Res>>)[method] as Unary<
        Req,
        Res
      >;
      fn.call(this.#client, req, { deadline: Date.now() + DEADLINE_MS }, (err, res) => {
        if (err) reject(new GrpcStoreError(`${method}: ${err.details}`, err.code, { cause: err }));
        else if (res === undefined) reject(new GrpcStoreError(`${method}: empty reply`, undefined));
        else resolve(res);
      });
    });
  }

  /** The rows of `keys` (keys.length × dim floats), validated against the request. */
  async pull(table: string, keys: BigUint64Array): Promise<Float32Array> {
    const r = await this.#unary<object, PullReply>('Pull', { table, keys: bytesOf(keys) });
    if (!Number.isInteger(r.dim) || r.dim <= 0 || r.rows.length !== keys.length * r.dim * 4)
      throw new GrpcStoreError(
        `Pull: reply of ${r.rows.length} B does not fit ${keys.length} keys × dim ${r.dim}`,
        undefined,
      );
    return f32View(r.rows);
  }

  push(
    table: string,
    keys: BigUint64Array,
    grads: Float32Array,
    opts: { session: string; seq: number },
  ): Promise<PushReply> {
    return this.#unary<object, PushReply>('Push', {
      table,
      keys: bytesOf(keys),
      grads: bytesOf(grads),
      session: opts.session,
      seq: String(opts.seq),
    });
  }

  close(): void {
    this.#client.close();
  }
}
