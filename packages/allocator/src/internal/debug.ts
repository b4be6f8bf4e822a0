/** Debug-mode helpers: allocation stacks and poisoning of released memory. */

/** Byte written over released memory in debug mode. */
export const POISON = 0xde;
const POISON_WORD = 0xdededede;

/** The current stack without its first line and without frames above `below`. */
export function captureStack(below: (...args: never[]) => unknown): string {
  const holder: { stack?: string } = {};
  Error.captureStackTrace(holder, below);
  const stack = holder.stack ?? '';
  const nl = stack.indexOf('\n');
  return nl < 0 ? '' : stack.slice(nl + 1);
}

export function poison(bytes: Uint8Array, offset: number, length: number): void {
  bytes.fill(POISON, offset, offset + length);
}

/** Offset of the first byte of [offset, offset + length) that is not poison, or -1. */
export function findUnpoisoned(bytes: Uint8Array, offset: number, length: number): number {
  const end = offset + length;
  let i = offset;
  const abs = bytes.byteOffset + offset;
  if ((abs & 3) === 0 && length >= 64) {
    // Word at a time while aligned; the byte loop below pins down the exact offset.
    const words = new Uint32Array(bytes.buffer, abs, length >>> 2);
    const n = words.length;
    let w = 0;
    while (w < n && words[w] === POISON_WORD) w++;
    i = offset + w * 4;
  }
  for (; i < end; i++) {
    if (bytes[i] !== POISON) return i;
  }
  return -1;
}
