import v8 from 'node:v8';
import vm from 'node:vm';

v8.setFlagsFromString('--expose-gc');

/**
 * A full, synchronous GC of this process's heap. Benchmarks call it between timed windows so
 * one window's garbage is not collected inside the next (another cell, or the other
 * transport's turn when both clients share this process).
 */
export const collectGarbage = vm.runInNewContext('gc') as () => void;
