import { invalidArg } from './errors.js';
import { createInit, type InitConfig } from './KeyInit.js';
import { createOptimizer, type Optimizer, type OptimizerConfig } from './Optimizer.js';

export interface DenseTensorConfig {
  name: string;
  /** Any shape; the product is the element count (≥ 1, ≤ 2^26). */
  shape: number[];
  optimizer: OptimizerConfig;
  /** Seeded inits use key 0 and the flat element index as the counter. */
  init?: InitConfig;
  /** Append pushes to the push log (when the store has one). Default true. */
  log?: boolean;
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
  }

  pull(out: Float32Array): void {
    out.set(this.values);
  }

  push(grad: Float32Array): void {
    this.step++;
    this.optimizer.update(this.values, 0, this.state, 0, grad, 0, this.length, this.step);
  }
}
