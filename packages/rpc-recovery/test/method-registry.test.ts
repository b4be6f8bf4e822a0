import { type MessagePart, partBytes } from '@rdmajs/mux';
import { describe, expect, it } from 'vitest';
import {
  DeduplicationTable,
  decodeRpcFrame,
  encodeRequestHeader,
  MethodRegistry,
  RpcError,
  RpcStatus,
} from '../src/index.js';

function request(
  method: string,
  payload: Uint8Array,
  idempotent = false,
  requestId = 7,
  sessionSeq = 0,
  epoch = 1,
): Uint8Array {
  const header = encodeRequestHeader({
    requestId,
    sessionSeq,
    ackBelow: 0,
    epoch,
    idempotent,
    deadlineMs: 1000,
    method,
    payloadLength: payload.length,
  });
  const out = new Uint8Array(header.length + payload.length);
  out.set(header, 0);
  out.set(payload, header.length);
  return out;
}

function response(parts: MessagePart[] | undefined) {
  expect(parts).toBeDefined();
  const bytes = (parts ?? []).map(partBytes);
  const total = bytes.reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of bytes) {
    out.set(p, o);
    o += p.length;
  }
  const f = decodeRpcFrame(out);
  if (f.kind !== 'response') throw new Error('not a response');
  return f;
}

describe('MethodRegistry', () => {
  it('server_runs_registered_method_and_returns_its_bytes', async () => {
    const reg = new MethodRegistry();
    reg.register('echo.upper', (p, ctx) => {
      expect(ctx.requestId).toBe(7);
      expect(ctx.method).toBe('echo.upper');
      return new TextEncoder().encode(new TextDecoder().decode(p).toUpperCase());
    });
    const r = response(
      await reg.dispatch(request('echo.upper', new TextEncoder().encode('hi'), false, 7, 0, 3), {
        epoch: 3,
      }),
    );
    expect(r.header.status).toBe(RpcStatus.Ok);
    expect(r.header.requestId).toBe(7);
    expect(r.header.epoch).toBe(3);
    expect(new TextDecoder().decode(r.payload)).toBe('HI');
  });

  it('handler_error_reaches_caller_as_code_and_message_without_stack', async () => {
    const reg = new MethodRegistry();
    reg.register('fail', () => {
      const e = new Error('table full\n    at secret (/srv/app.js:1:1)') as Error & {
        code: string;
      };
      e.code = 'ERR_TABLE_FULL';
      throw e;
    });
    const r = response(await reg.dispatch(request('fail', new Uint8Array(0)), { epoch: 1 }));
    expect(r.header.status).toBe(RpcStatus.Error);
    expect(r.header.errorCode).toBe('ERR_TABLE_FULL');
    expect(r.header.errorMessage).toBe('table full');
    expect(r.payload.length).toBe(0);
  });

  it('unknown_method_is_rejected_not_executed', async () => {
    const reg = new MethodRegistry();
    const r = response(await reg.dispatch(request('nope', new Uint8Array(1)), { epoch: 1 }));
    expect(r.header.status).toBe(RpcStatus.Rejected);
    expect(r.header.errorCode).toBe('ERR_RPC_METHOD_UNKNOWN');
  });

  it('idempotent_claim_on_non_idempotent_method_is_rejected_before_running', async () => {
    const reg = new MethodRegistry();
    let runs = 0;
    reg.register('inc', () => {
      runs++;
      return new Uint8Array(0);
    });
    const r = response(await reg.dispatch(request('inc', new Uint8Array(0), true), { epoch: 1 }));
    expect(r.header.status).toBe(RpcStatus.Rejected);
    expect(r.header.errorCode).toBe('ERR_RPC_IDEMPOTENCY_MISMATCH');
    expect(runs).toBe(0);
    expect(reg.isIdempotent('inc')).toBe(false);
  });

  it('malformed_frame_throws_typed_error', async () => {
    const reg = new MethodRegistry();
    await expect(reg.dispatch(new Uint8Array([1, 2, 3]), { epoch: 1 })).rejects.toBeInstanceOf(
      RpcError,
    );
  });

  it('duplicate_or_bad_registration_throws_typed_error', () => {
    const reg = new MethodRegistry();
    reg.register('a', () => new Uint8Array(0));
    expect(() => reg.register('a', () => new Uint8Array(0))).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_STATE' }),
    );
    expect(() => reg.register('', () => new Uint8Array(0))).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
  });

  it('request_of_another_epoch_is_dropped_unrun', async () => {
    const reg = new MethodRegistry();
    let runs = 0;
    reg.register('inc', () => new Uint8Array([++runs]));
    const old = request('inc', new Uint8Array(0), false, 7, 0, 1);
    expect(await reg.dispatch(old, { epoch: 2 })).toBeUndefined();
    expect(runs).toBe(0);
  });

  it('server_dedups_replayed_push', async () => {
    const reg = new MethodRegistry();
    const dedup = new DeduplicationTable();
    dedup.openSession('s1');
    let count = 0;
    reg.register('inc', () => new Uint8Array([++count]));
    const scope1 = { epoch: 1, sessionId: 's1', dedup };
    const first = response(
      await reg.dispatch(request('inc', new Uint8Array(0), false, 10, 0), scope1),
    );
    // The same (session, sequence) resent under a new epoch and request id after recovery.
    const scope2 = { epoch: 2, sessionId: 's1', dedup };
    const again = response(
      await reg.dispatch(request('inc', new Uint8Array(0), false, 11, 0, 2), scope2),
    );
    expect(count).toBe(1);
    expect(first.header.status).toBe(RpcStatus.Ok);
    expect(again.header.status).toBe(RpcStatus.Ok);
    expect(again.header.requestId).toBe(11);
    expect(again.header.epoch).toBe(2);
    expect([...again.payload]).toEqual([1]);
    const next = response(
      await reg.dispatch(request('inc', new Uint8Array(0), false, 12, 1, 2), scope2),
    );
    expect([...next.payload]).toEqual([2]);
    expect(count).toBe(2);
  });

  it('concurrent_duplicate_waits_for_first_execution', async () => {
    const reg = new MethodRegistry();
    const dedup = new DeduplicationTable();
    dedup.openSession('s1');
    let count = 0;
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    reg.register('inc', async () => {
      count++;
      await gate;
      return new Uint8Array([count]);
    });
    const scope = { epoch: 1, sessionId: 's1', dedup };
    const a = reg.dispatch(request('inc', new Uint8Array(0), false, 1, 5), scope);
    const b = reg.dispatch(request('inc', new Uint8Array(0), false, 2, 5), scope);
    release();
    const [ra, rb] = [response(await a), response(await b)];
    expect(count).toBe(1);
    expect([...ra.payload]).toEqual([1]);
    expect([...rb.payload]).toEqual([1]);
    expect(rb.header.requestId).toBe(2);
  });

  it('acknowledged_sequence_resent_is_unknown_not_reexecuted', async () => {
    const reg = new MethodRegistry();
    const dedup = new DeduplicationTable();
    dedup.openSession('s1');
    let count = 0;
    reg.register('inc', () => new Uint8Array([++count]));
    const scope = { epoch: 1, sessionId: 's1', dedup };
    await reg.dispatch(request('inc', new Uint8Array(0), false, 1, 0), scope);
    dedup.ack('s1', 1);
    const r = response(await reg.dispatch(request('inc', new Uint8Array(0), false, 2, 0), scope));
    expect(r.header.status).toBe(RpcStatus.Unknown);
    expect(r.header.errorCode).toBe('ERR_RPC_DEDUP_EXPIRED');
    expect(count).toBe(1);
  });

  it('unknown_session_is_rejected_not_executed', async () => {
    const reg = new MethodRegistry();
    const dedup = new DeduplicationTable();
    let count = 0;
    reg.register('inc', () => new Uint8Array([++count]));
    const r = response(
      await reg.dispatch(request('inc', new Uint8Array(0)), { epoch: 1, sessionId: 'x', dedup }),
    );
    expect(r.header.status).toBe(RpcStatus.Rejected);
    expect(r.header.errorCode).toBe('ERR_RPC_SESSION_UNKNOWN');
    expect(count).toBe(0);
  });
});

describe('MethodRegistry.dispatchNow', () => {
  it('answers_a_synchronous_handler_without_a_promise_and_an_async_one_with_one', async () => {
    const reg = new MethodRegistry();
    reg.register('sync', (p, ctx) => {
      const r = ctx.allocateReply(p.length);
      r.payload.set(p);
      return r;
    });
    reg.register('async', async (p) => p.slice());
    const now = reg.dispatchNow(request('sync', Uint8Array.of(1, 2, 3)), { epoch: 1 });
    expect(Array.isArray(now)).toBe(true);
    const f = response(now as MessagePart[]);
    expect(f.header.status).toBe(RpcStatus.Ok);
    expect(f.header.requestId).toBe(7);
    expect([...f.payload]).toEqual([1, 2, 3]);
    const later = reg.dispatchNow(request('async', Uint8Array.of(4)), { epoch: 1 });
    expect(later).toBeInstanceOf(Promise);
    expect([...response(await later).payload]).toEqual([4]);
  });

  it('throws_a_malformed_frame_synchronously_and_dispatch_rejects_it', async () => {
    const reg = new MethodRegistry();
    expect(() => reg.dispatchNow(new Uint8Array([1, 2, 3]), { epoch: 1 })).toThrow(RpcError);
    await expect(reg.dispatch(new Uint8Array([1, 2, 3]), { epoch: 1 })).rejects.toBeInstanceOf(
      RpcError,
    );
  });

  it('the_context_exposes_only_call_context_members', () => {
    const reg = new MethodRegistry();
    let keys: string[] = [];
    reg.register('k', (_p, ctx) => {
      keys = Object.keys(ctx).sort();
      return new Uint8Array(0);
    });
    reg.dispatchNow(request('k', new Uint8Array(0)), { epoch: 1 });
    expect(keys).toEqual([
      'allocateReply',
      'deadlineMs',
      'idempotent',
      'method',
      'peer',
      'requestId',
      'sessionId',
    ]);
  });

  it('a_handler_that_destructures_allocate_reply_as_documented_still_works', () => {
    const reg = new MethodRegistry();
    reg.register('echo', (p, { allocateReply }) => {
      const r = allocateReply(p.length);
      r.payload.set(p);
      return r;
    });
    const f = response(
      reg.dispatchNow(request('echo', Uint8Array.of(1, 2, 3)), { epoch: 1 }) as MessagePart[],
    );
    expect([f.header.status, [...f.payload]]).toEqual([RpcStatus.Ok, [1, 2, 3]]);
  });
});
