/** A spin-loop guard: throws once `ms` have passed, checking the clock every 1024 calls. */
export class SpinDeadline {
  readonly #until: number;
  readonly #what: string;
  #n = 0;

  constructor(ms: number, what: string) {
    this.#until = performance.now() + ms;
    this.#what = what;
  }

  check(): void {
    if ((++this.#n & 1023) === 0 && performance.now() > this.#until) {
      throw new Error(`benchmark stalled: ${this.#what} did not finish in time`);
    }
  }
}
