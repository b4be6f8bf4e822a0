import { NAME_PATTERN, WRITER_PATTERN } from '../Schema.js';

/** Names one pattern cache remembers; beyond it the oldest is forgotten (a bound, not a guess). */
const SLOTS = 16;

/**
 * Names already checked against one pattern, by their bytes (decoding) and by their string
 * (encoding). A table's requests carry the same few names over and over: a hit costs a byte
 * compare (decode) or a map lookup (encode) instead of building a string, a RegExp test and a
 * TextEncoder call per message. Only names that passed the pattern are ever remembered.
 */
export class NameCache {
  readonly pattern: RegExp;
  readonly #bytes: (Uint8Array | undefined)[] = new Array(SLOTS).fill(undefined);
  readonly #strings: (string | undefined)[] = new Array(SLOTS).fill(undefined);
  readonly #byString = new Map<string, Uint8Array>();
  #next = 0;

  constructor(pattern: RegExp) {
    this.pattern = pattern;
  }

  /** The remembered name whose bytes are b[offset, offset + len), else undefined. */
  find(b: Uint8Array, offset: number, len: number): string | undefined {
    for (let s = 0; s < SLOTS; s++) {
      const n = this.#bytes[s];
      if (n === undefined || n.length !== len) continue;
      let i = 0;
      while (i < len && n[i] === b[offset + i]) i++;
      if (i === len) return this.#strings[s];
    }
    return undefined;
  }

  /** The bytes of a remembered name, else undefined. Read only: shared by every caller. */
  bytesOf(name: string): Uint8Array | undefined {
    return this.#byString.get(name);
  }

  /** Remembers `name` (which matched the pattern) and its ASCII bytes. */
  add(name: string, bytes: Uint8Array): void {
    if (this.#byString.has(name)) return;
    const s = this.#next;
    this.#next = (s + 1) % SLOTS;
    const old = this.#strings[s];
    if (old !== undefined) this.#byString.delete(old);
    this.#strings[s] = name;
    this.#bytes[s] = bytes;
    this.#byString.set(name, bytes);
  }
}

export const TABLE_NAMES = new NameCache(NAME_PATTERN);
export const WRITER_NAMES = new NameCache(WRITER_PATTERN);

/** The cache of `pattern`'s names, if it has one. */
export function nameCacheOf(pattern: RegExp): NameCache | undefined {
  return pattern === NAME_PATTERN
    ? TABLE_NAMES
    : pattern === WRITER_PATTERN
      ? WRITER_NAMES
      : undefined;
}
