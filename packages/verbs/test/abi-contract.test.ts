// native/abi.h and src/internal/abi.ts are one contract: the addon's table equals the
// TypeScript one, and a drift is refused at load with the field named.
import { describe, expect, it } from 'vitest';
import { WC_STATUSES } from '../src/index.js';
import { ABI, checkAbi } from '../src/internal/abi.js';
import { loadAddon } from '../src/internal/native.js';

describe('the native ABI contract', () => {
  it('the addon exports exactly the table abi.ts holds', () => {
    expect(loadAddon().abi()).toEqual({ ...ABI });
  });

  it('the wc statuses the link names are the ibverbs ones JS names', () => {
    expect(WC_STATUSES[ABI.WC_REM_INV_REQ_ERR]).toBe('REM_INV_REQ_ERR');
    expect(ABI.WC_STATUS_LAST).toBe(WC_STATUSES.length - 1);
  });

  it('a field that differs is ERR_RDMA_NATIVE_LOAD naming it', () => {
    const drifted = { ...ABI, WC_WORDS: 9 };
    expect(() => checkAbi(drifted, 'x.node')).toThrow(
      expect.objectContaining({
        code: 'ERR_RDMA_NATIVE_LOAD',
        message: expect.stringContaining('ABI field WC_WORDS is 9 natively and 8 here'),
      }),
    );
    const { EV_LINK: _gone, ...missing } = ABI;
    expect(() => checkAbi(missing, 'x.node')).toThrow(/ABI field EV_LINK is missing natively/);
    expect(() => checkAbi({ ...ABI, EXTRA: 1 }, 'x.node')).toThrow(/ABI field EXTRA/);
  });
});
