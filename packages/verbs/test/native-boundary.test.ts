// Issue 9 (native hardening): no input that reaches the addon can abort the process or be
// taken for something else. Stale and foreign handles, a wrong receiver, short arrays, an
// unknown opcode (once carried out as a READ without an rkey check), SGE counts past the
// queue's, ranges past a buffer: each is a typed error or a refused post. Run in a child
// process: on 7ca85fe the first case aborts it (std::map::at under NAPI_DISABLE_CPP_EXCEPTIONS).
import { describe, expect, it } from 'vitest';
import { runIsolated } from './harness/isolated.js';

const INVALID = { code: 'ERR_RDMA_INVALID_ARG' };
// POST_EINVAL (1) returned and in the post record, with nothing posted.
const POST_EINVAL = { returned: { code: 1, posted: 0, recorded: 1 } };
const POSTED = (n: number) => ({ returned: { code: 0, posted: n, recorded: 0 } });

describe('native boundary on soft', () => {
  it('hostile calls end in typed errors or refused posts, and the QP still works', async () => {
    const r = await runIsolated<{
      cases: Record<string, unknown>;
      polled: number;
      seenStatus: number[];
      untouched: boolean;
      readStatus: number;
      readData: boolean;
    }>('native-boundary.ts');
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result?.cases).toEqual({
      'a SoftDevice without a post record': INVALID,
      'a SoftDevice with a post record of the wrong size': INVALID,
      'qpState of a handle never issued': INVALID,
      'pollCq of a handle never issued': INVALID,
      'createQp on a CQ handle never issued': INVALID,
      'modifyQp of a QP handle used as a CQ': INVALID,
      'modifyQp to init without attributes': INVALID,
      'modifyQp to rtr with a field missing': INVALID,
      'modifyQp to rts with a field out of range': INVALID,
      'a method called on an object that is not a SoftDevice': INVALID,
      'pollCq into something that is not a Float64Array': INVALID,
      'postSend of an opcode that does not exist': POST_EINVAL,
      'postSend of a fractional opcode': POST_EINVAL,
      // The one WR inside the array is posted; the next is refused.
      'postSend whose count overruns the array': { returned: { code: 1, posted: 1, recorded: 1 } },
      'postSend naming more SGEs than the QP takes': POST_EINVAL,
      'postRecv naming more SGEs than the QP takes': POST_EINVAL,
      'regMr of a range past the end of its buffer': { code: 'ERR_RDMA_OUT_OF_RANGE' },
      'allocMr of NaN bytes': { code: 'ERR_RDMA_OUT_OF_RANGE' },
      'destroyCq of a CQ a QP still uses': { code: 'ERR_RDMA_BUSY' },
      'inline SGEs whose sum wraps 32 bits': POST_EINVAL,
      'a WRITE longer than max_msg_sz': POSTED(1),
      'a well-formed READ after all that': POSTED(1),
      'qpState after close': { code: 'ERR_RDMA_CLOSED' },
    });
    // The one valid WR of the overrunning batch (a WRITE) completed, the long WRITE failed
    // LOC_LEN_ERR (1) without copying; nothing was read.
    expect(r.result?.seenStatus).toEqual([0, 1]);
    expect(r.result?.untouched).toBe(true);
    expect(r.result).toMatchObject({ readStatus: 0, readData: true });
  });

  it("a device's own method held after the device was collected throws a typed error", async () => {
    const r = await runIsolated<{ collected: boolean; outcomes: string[] }>('bound-methods.ts');
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.result).toEqual({ collected: true, outcomes: Array(4).fill('ERR_RDMA_INVALID_ARG') });
  });
});
