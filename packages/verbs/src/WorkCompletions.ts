import { ABI } from './internal/abi.js';
import { wcOpcodeName } from './internal/codes.js';
import { checkInt } from './internal/validate.js';
import { WC_STATUSES, type WcOpcode, type WcStatus, type WorkCompletion } from './types.js';

/** Most records one call preallocates (a CQ holds at most maxCqe completions). */
export const MAX_COMPLETION_RECORDS = 1 << 20;

/** Preallocates `n` completion records for `CompletionQueue.poll()` to fill. */
export function allocCompletions(n: number): WorkCompletion[] {
  checkInt('n', n, 0, MAX_COMPLETION_RECORDS);
  const out: WorkCompletion[] = [];
  for (let i = 0; i < n; i++) {
    out.push({
      wrId: 0,
      status: 'SUCCESS',
      opcode: 'SEND',
      byteLen: 0,
      imm: 0,
      withImm: false,
      qpNum: 0,
      srcQp: 0,
      vendorErr: 0,
    });
  }
  return out;
}

/** Fills `wc` from the native record (ABI.WC_WORDS doubles) at `raw[base..]`. */
export function fillCompletion(wc: WorkCompletion, raw: Float64Array, base: number): void {
  wc.wrId = raw[base + ABI.WC_WR_ID] as number;
  wc.status = (WC_STATUSES[raw[base + ABI.WC_STATUS] as number] ?? 'GENERAL_ERR') as WcStatus;
  wc.opcode = wcOpcodeName(raw[base + ABI.WC_OPCODE] as number) as WcOpcode;
  wc.byteLen = raw[base + ABI.WC_BYTE_LEN] as number;
  wc.imm = raw[base + ABI.WC_IMM] as number;
  wc.qpNum = raw[base + ABI.WC_QP_NUM] as number;
  // flags in the low byte, the vendor error above (can pass 2^31: no bitwise ops on it)
  const flags = raw[base + ABI.WC_FLAGS] as number;
  wc.withImm = ((flags % 256) & ABI.WC_FLAG_WITH_IMM) !== 0;
  wc.srcQp = raw[base + ABI.WC_SRC_QP] as number;
  wc.vendorErr = Math.floor(flags / 256);
}

/** Which completion statuses a caller may retry on a new connection. */
export function isRetryableStatus(status: WcStatus): boolean {
  return status === 'RETRY_EXC_ERR' || status === 'RNR_RETRY_EXC_ERR' || status === 'WR_FLUSH_ERR';
}
