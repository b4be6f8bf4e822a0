import type { Region, Registrar } from '../../src/index.js';

/** A region the fake handed out, with what it was asked for. */
export interface FakeRegion extends Region {
  readonly id: number;
  readonly kind: 'allocate' | 'register';
  readonly access: number;
  readonly length: number;
}

export interface RegistrarCall {
  readonly op: 'allocate' | 'register' | 'deregister';
  readonly length: number;
  readonly access: number;
}

const PAGE = 4096;

/**
 * An in-memory Registrar: real memory, distinct fake addresses (page-aligned, with a gap
 * between regions) and distinct keys (lkey ≠ rkey) per registration, a log of every call,
 * and injectable failures. Registering the same ArrayBuffer twice yields the same address
 * (same memory) but new keys, as a NIC would.
 */
export class FakeRegistrar implements Registrar<FakeRegion> {
  readonly calls: RegistrarCall[] = [];
  /** Regions registered and not yet deregistered. */
  readonly live = new Map<number, FakeRegion>();
  /** Problems seen (deregister of an unknown or dead region): must stay empty. */
  readonly misuse: string[] = [];
  #nextId = 1;
  #nextAddr = 0x10_0000_0000;
  #nextKey = 0x100;
  readonly #bufferAddr = new WeakMap<ArrayBufferLike, number>();
  #failures: Array<{ op: 'allocate' | 'register' | 'deregister'; error: unknown }> = [];

  /** This registrar without `allocate`: the allocator then registers memory it creates. */
  withoutAllocate(): Registrar<FakeRegion> {
    return {
      register: (bytes, access) => this.register(bytes, access),
      deregister: (region) => this.deregister(region),
    };
  }

  /** The next `op` call throws `error` (queued in order). */
  failNext(
    op: 'allocate' | 'register' | 'deregister',
    error: unknown = Object.assign(new Error('Cannot allocate memory'), { code: 'ENOMEM' }),
  ): void {
    this.#failures.push({ op, error });
  }

  get liveBytes(): number {
    let n = 0;
    for (const r of this.live.values()) n += r.length;
    return n;
  }

  count(op: RegistrarCall['op']): number {
    return this.calls.filter((c) => c.op === op).length;
  }

  /** The live region containing [addr, addr + length), if any. */
  regionOf(addr: number, length: number): FakeRegion | undefined {
    for (const r of this.live.values()) {
      if (addr >= r.addr && addr + length <= r.addr + r.length) return r;
    }
    return undefined;
  }

  /** The live region with this lkey, if any. */
  regionByKey(lkey: number): FakeRegion | undefined {
    for (const r of this.live.values()) if (r.lkey === lkey) return r;
    return undefined;
  }

  register(bytes: Uint8Array, access: number): FakeRegion {
    this.calls.push({ op: 'register', length: bytes.byteLength, access });
    this.#maybeFail('register');
    let base = this.#bufferAddr.get(bytes.buffer);
    if (base === undefined) {
      base = this.#reserveAddr(bytes.buffer.byteLength);
      this.#bufferAddr.set(bytes.buffer, base);
    }
    return this.#make('register', bytes, base + bytes.byteOffset, access);
  }

  deregister(region: FakeRegion): void {
    this.calls.push({ op: 'deregister', length: region?.length ?? 0, access: region?.access ?? 0 });
    if (!this.live.has(region?.id)) this.misuse.push(`deregister of unknown region ${region?.id}`);
    this.live.delete(region?.id);
    this.#maybeFail('deregister');
  }

  allocate(length: number, access: number): FakeRegion {
    this.calls.push({ op: 'allocate', length, access });
    this.#maybeFail('allocate');
    return this.#make('allocate', new Uint8Array(length), this.#reserveAddr(length), access);
  }

  #make(kind: FakeRegion['kind'], bytes: Uint8Array, addr: number, access: number): FakeRegion {
    const lkey = this.#nextKey++;
    const rkey = this.#nextKey++;
    const region: FakeRegion = {
      id: this.#nextId++,
      kind,
      access,
      length: bytes.byteLength,
      bytes,
      addr,
      lkey,
      rkey,
    };
    this.live.set(region.id, region);
    return region;
  }

  #reserveAddr(length: number): number {
    const addr = this.#nextAddr;
    this.#nextAddr += Math.ceil(length / PAGE) * PAGE + PAGE; // a guard page between regions
    return addr;
  }

  #maybeFail(op: 'allocate' | 'register' | 'deregister'): void {
    const i = this.#failures.findIndex((f) => f.op === op);
    if (i < 0) return;
    const [f] = this.#failures.splice(i, 1);
    throw f?.error;
  }
}
