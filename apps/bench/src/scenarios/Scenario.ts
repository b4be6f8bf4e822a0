import type { Result } from '../report/Result.js';
import type { HeadlineValues } from '../report/summary.js';
import type { RdmaTuning } from './evaluation/RdmaTuning.js';

export interface ScenarioOptions {
  provider: 'soft' | 'ibverbs';
  /** Base number of measured round trips (big sizes use fewer). */
  iterations: number;
  sizes: number[];
  /** Which sides to run: 'tcp', 'rdma' (the chosen verbs provider). */
  transports: ('tcp' | 'rdma')[];
  /** Seconds instead of minutes (CI, smoke tests). */
  quick?: boolean;
  /** verbs-pingpong: rounds each size's rows are interleaved in (default PINGPONG_ROUNDS). */
  rounds?: number;
  /** RDMA knobs of the evaluation's client and shards (`--rdma-*`); unset: mux's defaults. */
  rdma?: RdmaTuning;
}

export interface Scenario {
  name: string;
  description: string;
  run(options: ScenarioOptions, progress: (label: string) => void): Promise<Result[]>;
  /** Lines printed under the table: the scenario's own verdicts. */
  summarize?(results: Result[]): string;
  /**
   * The headline ratios this scenario measures (the others stay null in the summary), and
   * any figures it reports beside them.
   */
  headlines?(results: Result[]): HeadlineValues;
}
