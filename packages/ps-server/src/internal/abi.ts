// Mirror of native/abi.h: every number the kernels addon and this side must agree on. The
// loader checks the addon's exported table against this one (checkAbi), so the two cannot
// drift apart unnoticed.
import { PsError } from '../errors.js';

export const ABI = {
  version: 9,
  OPT_SGD: 0,
  OPT_SGD_MOMENTUM: 1,
  OPT_ADAGRAD: 2,
  OPT_FTRL: 3,
  OPT_SUM: 4,
  OPT_ASSIGN: 5,
  OPT_ADAM: 6,
  OPT_ADAMW: 7,
  OPT_SGD_PARAMS: 2,
  OPT_SGD_MOMENTUM_PARAMS: 5,
  OPT_ADAGRAD_PARAMS: 4,
  OPT_FTRL_PARAMS: 4,
  OPT_ADAM_PARAMS: 8,
  OPT_ADAM_STEP_SCALARS: 2,
  ROW_F32: 0,
  ROW_F16: 1,
  ROW_ALIGN: 64,
  IDX_EMPTY: -1,
  IDX_GONE: -2,
  IDX_TAG_EMPTY: 0,
  IDX_TAG_PAD: 16,
  IDX_BUCKET_INTS: 3,
  K_BAD_LENGTH: -1,
  K_BAD_SLOT: -2,
  VIEW_META_INTS: 4,
} as const;

/** Throws ERR_PS_NATIVE_LOAD naming the first field that differs. */
export function checkAbi(native: Record<string, number>, where: string): void {
  const names = new Set([...Object.keys(ABI), ...Object.keys(native)]);
  for (const name of names) {
    const js = (ABI as Record<string, number>)[name];
    const cc = native[name];
    if (js !== cc)
      throw new PsError(
        'ERR_PS_NATIVE_LOAD',
        `@rdmajs/ps-server: the kernels addon at ${where} does not match this JavaScript: ABI field ${name} is ${cc ?? 'missing'} natively and ${js ?? 'missing'} here; rebuild it (pnpm build) or reinstall the package`,
      );
  }
}
