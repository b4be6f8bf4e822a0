// BENCH_ONE_SIDED_*: the evaluation's RDMA clients' one-sided options, from the environment.
import { describe, expect, it } from 'vitest';
import {
  oneSidedBusyMaxKeysFromEnv,
  oneSidedMaxLoadFromEnv,
  oneSidedReadersFromEnv,
} from '../src/scenarios/evaluation/PsTarget.js';

const KNOBS = [
  {
    name: 'BENCH_ONE_SIDED_READERS',
    parse: oneSidedReadersFromEnv,
    good: { '1': 1, '32': 32 },
    bad: ['0', '-2', '2.5', 'four', 'NaN', ' '],
  },
  {
    name: 'BENCH_ONE_SIDED_MAX_LOAD',
    parse: oneSidedMaxLoadFromEnv,
    good: { '0': 0, '0.5': 0.5, '1': 1 },
    bad: ['-0.1', '1.5', 'half', 'NaN', ' ', '\t'],
  },
  {
    name: 'BENCH_ONE_SIDED_BUSY_MAX_KEYS',
    parse: oneSidedBusyMaxKeysFromEnv,
    good: { '0': 0, '32': 32 },
    bad: ['-1', '2.5', 'many', 'NaN', ' '],
  },
];

for (const k of KNOBS) {
  describe(k.name, () => {
    it('unset_or_empty_leaves_ps_clients_default_and_a_valid_value_is_taken_as_it_is', () => {
      expect(k.parse(undefined)).toBeUndefined();
      expect(k.parse('')).toBeUndefined();
      for (const [text, value] of Object.entries(k.good)) expect(k.parse(text)).toBe(value);
    });

    it('anything_else_is_refused_with_the_variable_named', () => {
      for (const bad of k.bad) expect(() => k.parse(bad)).toThrow(new RegExp(k.name));
    });
  });
}
