// BENCH_ONE_SIDED_READERS: the evaluation's RDMA clients' one-sided readers per (shard, table).
import { describe, expect, it } from 'vitest';
import {
  oneSidedBusyMaxKeysFromEnv,
  oneSidedMaxLoadFromEnv,
  oneSidedReadersFromEnv,
} from '../src/scenarios/evaluation/PsTarget.js';

describe('BENCH_ONE_SIDED_READERS', () => {
  it('unset_or_empty_leaves_ps_clients_default_and_a_count_is_taken_as_it_is', () => {
    expect(oneSidedReadersFromEnv(undefined)).toBeUndefined();
    expect(oneSidedReadersFromEnv('')).toBeUndefined();
    expect(oneSidedReadersFromEnv('1')).toBe(1);
    expect(oneSidedReadersFromEnv('32')).toBe(32);
  });

  it('anything_but_a_positive_integer_is_refused_with_the_variable_named', () => {
    for (const bad of ['0', '-2', '2.5', 'four', 'NaN'])
      expect(() => oneSidedReadersFromEnv(bad)).toThrow(/BENCH_ONE_SIDED_READERS/);
  });
});

describe('BENCH_ONE_SIDED_MAX_LOAD', () => {
  it('unset_or_empty_leaves_ps_clients_default_and_a_load_in_0_1_is_taken_as_it_is', () => {
    expect(oneSidedMaxLoadFromEnv(undefined)).toBeUndefined();
    expect(oneSidedMaxLoadFromEnv('')).toBeUndefined();
    expect(oneSidedMaxLoadFromEnv('0')).toBe(0);
    expect(oneSidedMaxLoadFromEnv('0.5')).toBe(0.5);
    expect(oneSidedMaxLoadFromEnv('1')).toBe(1);
  });

  it('anything_but_a_number_in_0_1_is_refused_with_the_variable_named', () => {
    for (const bad of ['-0.1', '1.5', 'half', 'NaN', ' ', '\t'])
      expect(() => oneSidedMaxLoadFromEnv(bad)).toThrow(/BENCH_ONE_SIDED_MAX_LOAD/);
  });
});

describe('BENCH_ONE_SIDED_BUSY_MAX_KEYS', () => {
  it('unset_or_empty_leaves_ps_clients_default_and_a_count_is_taken_as_it_is', () => {
    expect(oneSidedBusyMaxKeysFromEnv(undefined)).toBeUndefined();
    expect(oneSidedBusyMaxKeysFromEnv('')).toBeUndefined();
    expect(oneSidedBusyMaxKeysFromEnv('0')).toBe(0);
    expect(oneSidedBusyMaxKeysFromEnv('32')).toBe(32);
  });

  it('anything_but_an_integer_of_0_or_more_is_refused_with_the_variable_named', () => {
    for (const bad of ['-1', '2.5', 'many', 'NaN', ' '])
      expect(() => oneSidedBusyMaxKeysFromEnv(bad)).toThrow(/BENCH_ONE_SIDED_BUSY_MAX_KEYS/);
  });
});
