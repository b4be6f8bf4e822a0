import { invalidArg } from './errors.js';
import { F32_MAX, saturate } from './internal/saturate.js';
import { createInit, type InitConfig } from './KeyInit.js';
import {
  createOptimizer,
  type Optimizer,
  type OptimizerConfig,
  type OverflowPolicy,
  overflowPolicy,
} from './Optimizer.js';

export interface DenseTensorConfig {
  name: string;
  /** Any shape; the product is the element count (≥ 1, ≤ 2^26). */
  shape: number[];
  optimizer: OptimizerConfig;
  /** Seeded inits use key 0 and the flat element index as the counter. */
  init?: InitConfig;
  /** Append pushes to the push log (when the store has one). Default true. */
  log?: boolean;
  /**
   * Non-finite update results: see OverflowPolicy. Default 'saturate' (each push then copies
   * the values and state it changes, block by block, into a small scratch to restore from).
   */
  overflow?: OverflowPolicy;
}

/** Elements updated and saturated at a time (saturating tensors): 8 KiB per state tensor. */
const SATURATE_BLOCK = 2048;

/** A named float32 tensor updated as a whole by its optimizer (one step count). */
export class DenseTensor {
  readonly name: string;
  readonly shape: readonly number[];
  readonly length: number;
  readonly optimizer: Optimizer;
  readonly config: Readonly<DenseTensorConfig>;
  readonly logged: boolean;
  values: Float32Array;
  state: Float32Array;
  step = 0;
  /** Saturating: one block's values and state from before its update, then its state. */
  readonly #old: Float32Array | null;
  readonly #work: Float32Array | null;
  readonly #stateSlots: number;

  constructor(config: DenseTensorConfig) {
    if (config === null || typeof config !== 'object')
      throw invalidArg('dense config must be an object');
    if (typeof config.name !== 'string' || !/^[A-Za-z0-9_.-]{1,200}$/.test(config.name))
      throw invalidArg('dense tensor name must be 1–200 characters of [A-Za-z0-9_.-]');
    if (!Array.isArray(config.shape) || config.shape.some((d) => !Number.isInteger(d) || d < 1))
      throw invalidArg(`dense ${config.name}: shape must be positive integers`);
    const length = config.shape.reduce((a, b) => a * b, 1);
    // A push of the whole tensor must fit one log record (MAX_PUSH_FLOATS).
    if (length > 2 ** 26) throw invalidArg(`dense ${config.name}: more than 2^26 elements`);
    this.name = config.name;
    this.shape = [...config.shape];
    this.length = length;
    this.config = config;
    this.logged = config.log ?? true;
    this.optimizer = createOptimizer(config.optimizer);
    this.values = new Float32Array(length);
    createInit(config.init)(this.values, 0, length, 0, 0);
    const ns = this.optimizer.stateNames.length;
    this.state = new Float32Array(ns * length);
    for (let k = 0; k < ns; k++)
      this.state.fill(this.optimizer.stateInit[k] as number, k * length, (k + 1) * length);
    this.#stateSlots = ns;
    const saturating = overflowPolicy(`dense ${config.name}`, config.overflow) === 'saturate';
    const block = Math.min(length, SATURATE_BLOCK);
    this.#old = saturating ? new Float32Array((1 + ns) * block) : null;
    // Two or more state tensors lie `length` apart; the optimizer reads them `n` apart.
    this.#work = saturating && ns > 1 ? new Float32Array(ns * block) : null;
  }

  pull(out: Float32Array): void {
    out.set(this.values);
  }

  push(grad: Float32Array): void {
    this.step++;
    if (this.#old === null) {
      this.optimizer.update(this.values, 0, this.state, 0, grad, 0, this.length, this.step);
      return;
    }
    for (let a = 0; a < this.length; a += SATURATE_BLOCK)
      this.#pushBlock(grad, a, Math.min(SATURATE_BLOCK, this.length - a));
  }

  /**
   * Elements [a, a+n) updated and saturated against their values from before: a block at a
   * time, so the copy saturation needs stays in cache and small (not a second tensor). The
   * update is per element, so blocks give what one whole-tensor update gives, bit for bit.
   */
  #pushBlock(grad: Float32Array, a: number, n: number): void {
    const { values, state, length } = this;
    const old = this.#old as Float32Array;
    const ns = this.#stateSlots;
    const work = this.#work;
    // set() is a memcpy; its views are a few per 2048 elements, not per element.
    old.set(values.subarray(a, a + n), 0);
    for (let k = 0; k < ns; k++)
      old.set(state.subarray(k * length + a, k * length + a + n), (1 + k) * n);
    if (work === null) {
      // No state, or one tensor: it is read in place at offset a.
      this.optimizer.update(values, a, state, a, grad, a, n, this.step);
      saturate(values, a, n, old, 0, F32_MAX);
      saturate(state, a, ns * n, old, n, F32_MAX);
      return;
    }
    work.set(old.subarray(n, (1 + ns) * n), 0);
    this.optimizer.update(values, a, work, 0, grad, a, n, this.step);
    saturate(values, a, n, old, 0, F32_MAX);
    saturate(work, 0, ns * n, old, n, F32_MAX);
    for (let k = 0; k < ns; k++) state.set(work.subarray(k * n, (k + 1) * n), k * length + a);
  }
}
