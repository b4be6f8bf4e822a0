import { loadKernels } from './internal/native.js';

let native: ((f: Float32Array) => number) | null | undefined;

function js(f: Float32Array): number {
  for (let i = 0; i < f.length; i++) if (!Number.isFinite(f[i])) return i;
  return -1;
}

/**
 * Index of the first NaN or ±Inf in `f`, or -1: how a service checks an untrusted push before
 * anything is applied. Runs in the kernels addon (64 floats per branch, several times faster
 * than a JS loop on a push's gradients) when it loads, else in JS.
 */
export function firstNonFinite(f: Float32Array): number {
  if (native === undefined) {
    try {
      native = loadKernels().firstNonFinite;
    } catch {
      native = null;
    }
  }
  return native === null ? js(f) : native(f);
}
