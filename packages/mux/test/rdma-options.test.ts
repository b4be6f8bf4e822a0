import { describe, expect, it } from 'vitest';
import { parseRdmaTuning } from '../src/internal/RdmaOptions.js';
import { thrownCode as code } from './support/thrownCode.js';

describe('rdma tuning options', () => {
  it('options_default_to_one_qp_32KiB_eager_and_event_polling', () => {
    expect(parseRdmaTuning()).toEqual({
      qpPoolSize: 1,
      eagerThreshold: 32768,
      recvBufferCount: 256,
      pollPolicy: 'event',
    });
    expect(parseRdmaTuning({ qpPoolSize: 2, pollPolicy: 'adaptive' }).qpPoolSize).toBe(2);
  });

  it('options_out_of_range_throw_invalid_arg', () => {
    for (const bad of [
      { qpPoolSize: 0 },
      { qpPoolSize: 9 },
      { eagerThreshold: 1.5 },
      { recvBufferCount: 1 },
      { pollPolicy: 'spin' as never },
    ]) {
      expect(code(() => parseRdmaTuning(bad))).toBe('ERR_MUX_INVALID_ARG');
    }
  });
});
