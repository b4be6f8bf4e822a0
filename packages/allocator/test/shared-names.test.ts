// Issue 8: names shared with @rdmajs/verbs mean the same thing there. `Access` has verbs'
// values; `Sge` is verbs' shape both ways (checked by the compiler in typecheck, and at run
// time by posting allocator Sges on the soft provider in soft-provider-e2e).
import { Access as VerbsAccess, type Sge as VerbsSge } from '@rdmajs/verbs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import * as allocator from '../src/index.js';
import { Access, type Sge } from '../src/index.js';
import { setup } from './helpers.js';

describe('names shared with verbs', () => {
  it('Access is verbs’ Access, value for value', () => {
    expect(Access).toEqual(VerbsAccess);
  });

  it('Sge is verbs’ Sge: a block, a slice and a RegisteredBuffer go straight into an sgList', () => {
    expectTypeOf<Sge>().toEqualTypeOf<VerbsSge>();
    const { a } = setup();
    const b = a.alloc(64);
    const sgList: VerbsSge[] = [b.sge(), b.slice(8, 8), a.cache.acquire(new ArrayBuffer(8))];
    expect(sgList.map((s) => s.length)).toEqual([64, 8, 8]);
  });

  it('tuning internals are not exported', () => {
    for (const name of [
      'MAX_SLAB_BYTES',
      'PAGE_BYTES',
      'SIZE_CLASSES',
      'SMALL_MAX_BYTES',
      'sizeClassIndex',
      'blockCapacity',
      'AccessFlags',
    ]) {
      expect(Object.keys(allocator)).not.toContain(name);
    }
  });
});
