import { counterU32, type InitConfig, type InitFn, initRowFn, resolveInit } from '@rdmajs/ps-wire';
import { invalidArg } from './errors.js';

// The init policy is part of the wire schema (a client fills the rows of a shard that did
// not answer in time with it), so its one definition lives in @rdmajs/ps-wire.
export { counterU32, type InitConfig, type InitFn };

/** The row generator of `config` (default zeros); bad values are ERR_PS_INVALID_ARG. */
export function createInit(config: InitConfig | undefined): InitFn {
  let resolved: ReturnType<typeof resolveInit>;
  try {
    resolved = resolveInit(config);
  } catch (err) {
    throw invalidArg((err as Error).message);
  }
  return initRowFn(resolved);
}
