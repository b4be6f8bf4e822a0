import { describe, expect, it } from 'vitest';
import { parseRdmaTuning } from '../src/internal/RdmaOptions.js';
import { thrownCode as code } from './support/thrownCode.js';

describe('rdma tuning options', () => {
  it('options_default_to_one_qp_32KiB_eager_and_event_polling', () => {
    expect(parseRdmaTuning()).toEqual({
      qpPoolSize: 1,
      eagerThreshold: 32768,
      recvBufferCount: 256,
      recvCredits: 16,
      leaseIdleMs: 1000,
      pollPolicy: 'event',
      ablations: 0,
    });
    // The initial lease never exceeds the most a peer may lease.
    expect(parseRdmaTuning({ recvBufferCount: 8 }).recvCredits).toBe(8);
    expect(parseRdmaTuning({ qpPoolSize: 2, pollPolicy: 'adaptive' }).qpPoolSize).toBe(2);
  });

  it('options_out_of_range_throw_invalid_arg', () => {
    for (const bad of [
      { qpPoolSize: 0 },
      { qpPoolSize: 9 },
      { eagerThreshold: 1.5 },
      { recvBufferCount: 1 },
      { recvCredits: 3 },
      { recvBufferCount: 16, recvCredits: 17 },
      { leaseIdleMs: 0 },
      { pollPolicy: 'spin' as never },
    ]) {
      expect(code(() => parseRdmaTuning(bad))).toBe('ERR_MUX_INVALID_ARG');
    }
  });
});
