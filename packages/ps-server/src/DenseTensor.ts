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
   * Non-finite update results: see OverflowPolicy. Default 'saturate' (each push then keeps
   * a copy of the values and state from before it: twice the tensor's memory).
   */
  overflow?: OverflowPolicy;
}

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
  /** Saturating: values and state before the update in progress. */
  readonly #old: Float32Array | null;

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
    this.#old =
      overflowPolicy(`dense ${config.name}`, config.overflow) === 'saturate'
        ? new Float32Array(length + this.state.length)
        : null;
  }

  pull(out: Float32Array): void {
    out.set(this.values);
  }

  push(grad: Float32Array): void {
    this.step++;
    const old = this.#old;
    if (old !== null) {
      old.set(this.values, 0);
      old.set(this.state, this.length);
    }
    this.optimizer.update(this.values, 0, this.state, 0, grad, 0, this.length, this.step);
    if (old !== null) {
      saturate(this.values, 0, this.length, old, 0, F32_MAX);
      saturate(this.state, 0, this.state.length, old, this.length, F32_MAX);
    }
  }
}
