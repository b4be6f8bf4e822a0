// Bench peers run the code the bench itself runs: compiled JavaScript when the bench runs from
// `dist` (`pnpm bench` after `pnpm build`: what a user deploys), the TypeScript sources through
// tsx when the bench does (tests, `start:source`). tsx's transform is not free on hot paths —
// its keepNames wraps every named closure in an `Object.defineProperty` each time it is made —
// so a measured process must not pay it unless the bench's own code does.
import { fileURLToPath } from 'node:url';

/** This module was loaded as TypeScript: the bench runs from its sources. */
export const runsFromSource = import.meta.url.endsWith('.ts');

/** Node options a peer needs to run as the bench does (tsx and the source condition, or none). */
export const peerExecArgv: readonly string[] = runsFromSource
  ? ['--import', 'tsx', '--conditions=@rdmajs/source']
  : [];

/**
 * The URL of a sibling script of `base` (an `import.meta.url`), named without its extension
 * (`'./echo-peer'`): its `.ts` source or its compiled `.js`, as this build runs.
 */
export function peerScriptUrl(relative: string, base: string): URL {
  return new URL(`${relative}${runsFromSource ? '.ts' : '.js'}`, base);
}

/** `peerScriptUrl` as a file path, for `fork`. */
export function peerScriptPath(relative: string, base: string): string {
  return fileURLToPath(peerScriptUrl(relative, base));
}
