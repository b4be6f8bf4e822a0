import { allocatorScenario } from './allocator.js';
import { evaluationScenario } from './evaluation/index.js';
import { grpcStoreScenario } from './grpc-store.js';
import { muxScenario } from './mux.js';
import { psScenario } from './ps.js';
import { rpcScenario } from './rpc.js';
import type { Scenario } from './Scenario.js';
import { storeScenario } from './store.js';
import { verbsPingPongScenario } from './verbs-pingpong.js';

/** Every scenario `rdmajs-bench <name>` can run; new ones register here. */
export const scenarios: ReadonlyMap<string, Scenario> = new Map([
  [evaluationScenario.name, evaluationScenario],
  [verbsPingPongScenario.name, verbsPingPongScenario],
  [allocatorScenario.name, allocatorScenario],
  [storeScenario.name, storeScenario],
  [grpcStoreScenario.name, grpcStoreScenario],
  [muxScenario.name, muxScenario],
  [rpcScenario.name, rpcScenario],
  [psScenario.name, psScenario],
]);
