import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ABLATE_CREDITS,
  ABLATE_SEND_WINDOW,
  decodeRdmaSetup,
  encodeRdmaSetup,
  MAX_SETUP_QPS,
  type RdmaSetup,
} from '../src/internal/RdmaSetup.js';
import { thrownCode as code } from './support/thrownCode.js';

const base: RdmaSetup = {
  // One channel QP, then the read QP (version 3).
  endpoints: [
    { provider: 'soft', transport: 'shm', qpn: 17, psn: 99, bootId: 'b', pid: 1 },
    { provider: 'soft', transport: 'shm', qpn: 19, psn: 7, bootId: 'b', pid: 1 },
  ],
  recvBufferBytes: 8192,
  recvBufferCount: 64,
  flow: {
    version: 1,
    receiveCredits: 64,
    reservedCredits: 2,
    returnThreshold: 16,
    windowBytes: 1 << 20,
    windowMessages: 256,
    maxMessageBytes: 8192,
  },
  ablations: 0,
  incarnation: 0x0123456789abcdefn,
};

describe('rdma setup message', () => {
  it('setup_round_trips_endpoints_buffers_and_flow_params', () => {
    const two = { ...base, endpoints: [...base.endpoints, { provider: 'soft', qpn: 18 }] };
    expect(decodeRdmaSetup(encodeRdmaSetup(two))).toEqual(two);
    const ablated = { ...base, ablations: ABLATE_CREDITS | ABLATE_SEND_WINDOW };
    expect(decodeRdmaSetup(encodeRdmaSetup(ablated))).toEqual(ablated);
  });

  it('setup_encode_rejects_promises_the_buffers_do_not_keep', () => {
    expect(code(() => encodeRdmaSetup({ ...base, recvBufferCount: 10 }))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(code(() => encodeRdmaSetup({ ...base, recvBufferBytes: 4096 }))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(code(() => encodeRdmaSetup({ ...base, endpoints: [] }))).toBe('ERR_MUX_INVALID_ARG');
    // No read QP.
    expect(code(() => encodeRdmaSetup({ ...base, endpoints: base.endpoints.slice(0, 1) }))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(code(() => encodeRdmaSetup({ ...base, incarnation: 0n }))).toBe('ERR_MUX_INVALID_ARG');
    const many = Array.from({ length: MAX_SETUP_QPS + 2 }, (_, i) => ({ provider: 's', qpn: i }));
    expect(code(() => encodeRdmaSetup({ ...base, endpoints: many }))).toBe('ERR_MUX_INVALID_ARG');
  });

  it('setup_decode_rejects_tampered_fields_with_a_protocol_error', () => {
    const good = Buffer.from(encodeRdmaSetup(base));
    const tamper = (f: (b: Buffer) => void) => {
      const b = Buffer.from(good);
      f(b);
      return code(() => decodeRdmaSetup(b));
    };
    expect(tamper((b) => b.writeUInt16BE(1, 0))).toBe('ERR_MUX_PROTOCOL'); // version
    expect(tamper((b) => b.writeUInt8(0, 2))).toBe('ERR_MUX_PROTOCOL'); // no QPs
    expect(tamper((b) => b.writeUInt8(1, 2))).toBe('ERR_MUX_PROTOCOL'); // no read QP
    expect(tamper((b) => b.writeBigUInt64BE(0n, b.length - 8))).toBe('ERR_MUX_PROTOCOL'); // incarnation 0
    expect(tamper((b) => b.writeUInt8(4, 3))).toBe('ERR_MUX_PROTOCOL'); // unknown ablation bit
    expect(tamper((b) => b.writeUInt32BE(1 << 20, 16))).toBe('ERR_MUX_PROTOCOL'); // credits > buffers
    expect(tamper((b) => b.writeUInt16BE(0xffff, 40))).toBe('ERR_MUX_PROTOCOL'); // endpoint length
    expect(tamper((b) => b.write('x', 42))).toBe('ERR_MUX_PROTOCOL'); // not JSON
    expect(code(() => decodeRdmaSetup(good.subarray(0, good.length - 1)))).toBe('ERR_MUX_PROTOCOL');
    expect(code(() => decodeRdmaSetup(Buffer.concat([good, Buffer.of(0)])))).toBe(
      'ERR_MUX_PROTOCOL',
    );
  });

  it('setup_decode_of_arbitrary_bytes_returns_a_valid_setup_or_a_protocol_error', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        let s: RdmaSetup;
        try {
          s = decodeRdmaSetup(bytes);
        } catch (e) {
          expect((e as { code?: string }).code).toBe('ERR_MUX_PROTOCOL');
          return;
        }
        expect(s.flow.receiveCredits).toBeLessThanOrEqual(s.recvBufferCount);
      }),
    );
  });
});
