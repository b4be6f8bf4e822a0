/**
 * The registered bytes an allocator and its peer pools (`forPeer()`) may hold together: one
 * `maxRegisteredBytes` for the whole family, so pools per peer do not multiply the limit.
 * Members are the allocators that count against it (those not yet closed).
 */
export class RegistrationBudget<M> {
  used = 0;
  readonly members = new Set<M>();

  constructor(readonly max: number) {}

  /** True when `need` more bytes fit under the family's limit. */
  fits(need: number): boolean {
    return this.used + need <= this.max;
  }

  /** Bytes still registrable under the family's limit. */
  get room(): number {
    return this.max - this.used;
  }
}
