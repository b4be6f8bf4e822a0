import { describe, expect, it } from 'vitest';
import {
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
): Uint8Array {
  const header = encodeRequestHeader({
    requestId,
    sessionSeq: 0,
    ackBelow: 0,
    epoch: 1,
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

function response(parts: Uint8Array[] | undefined) {
  expect(parts).toBeDefined();
  const total = (parts ?? []).reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts ?? []) {
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
      await reg.dispatch(request('echo.upper', new TextEncoder().encode('hi')), 3),
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
    const r = response(await reg.dispatch(request('fail', new Uint8Array(0)), 1));
    expect(r.header.status).toBe(RpcStatus.Error);
    expect(r.header.errorCode).toBe('ERR_TABLE_FULL');
    expect(r.header.errorMessage).toBe('table full');
    expect(r.payload.length).toBe(0);
  });

  it('unknown_method_is_rejected_not_executed', async () => {
    const reg = new MethodRegistry();
    const r = response(await reg.dispatch(request('nope', new Uint8Array(1)), 1));
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
    const r = response(await reg.dispatch(request('inc', new Uint8Array(0), true), 1));
    expect(r.header.status).toBe(RpcStatus.Rejected);
    expect(r.header.errorCode).toBe('ERR_RPC_IDEMPOTENCY_MISMATCH');
    expect(runs).toBe(0);
    expect(reg.isIdempotent('inc')).toBe(false);
  });

  it('malformed_frame_throws_typed_error', async () => {
    const reg = new MethodRegistry();
    await expect(reg.dispatch(new Uint8Array([1, 2, 3]), 1)).rejects.toBeInstanceOf(RpcError);
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
});
