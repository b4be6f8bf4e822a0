/**
 * Method names decoded from request frames, kept as strings: a frame whose name bytes equal
 * a kept name gets that very string, so the server neither builds the name again character
 * by character nor hashes a new string for its method lookup on every request. Only names
 * that passed the character check are kept; a full cache starts over (a peer sending many
 * names costs itself the slow path, never unbounded memory).
 */
export class MethodNames {
  readonly #names: string[] = [];
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  /** The kept name equal to `bytes[at, at + len)`, if any. */
  find(bytes: Uint8Array, at: number, len: number): string | undefined {
    const names = this.#names;
    for (let n = 0; n < names.length; n++) {
      const s = names[n] as string;
      if (s.length !== len) continue;
      let i = 0;
      while (i < len && s.charCodeAt(i) === bytes[at + i]) i++;
      if (i === len) return s;
    }
    return undefined;
  }

  /** Keeps a name that passed the check. */
  add(name: string): void {
    if (this.#names.length >= this.#max) this.#names.length = 0;
    this.#names.push(name);
  }
}
