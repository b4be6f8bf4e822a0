// Option parsing of the CLI (node:util parseArgs): a bad option is ERR_RDMA_INVALID_ARG.
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { RdmaError } from '../index.js';

export type ParsedOptions = Record<string, string | boolean | undefined>;

export function parseOptions(
  args: string[],
  options: NonNullable<ParseArgsConfig['options']>,
): ParsedOptions {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false })
      .values as ParsedOptions;
  } catch (err) {
    throw usageError((err as Error).message, err);
  }
}

export function usageError(message: string, cause?: unknown): RdmaError {
  return new RdmaError('ERR_RDMA_INVALID_ARG', message, cause === undefined ? {} : { cause });
}
