// @rdmajs/verbs/testing: fault injection for tests of code built on verbs. Not part of
// the main entry point, so production code cannot break its own QPs by accident.
import type { Fault } from './internal/driver.js';
import { kDriver } from './internal/symbols.js';
import { describe, invalid, isPlainObject } from './internal/validate.js';
import { QueuePair } from './QueuePair.js';

export type { Fault };

/**
 * Injects a fault into `qp`. `break-qp` works on every provider (the QP moves to error);
 * `break-link` (the peer's link fails), `stall-receiver` (the receiver stops taking
 * messages: RNR), `delay` (ms added to each operation) and `hold-peer-lock` need the soft
 * provider. `hold-peer-lock` takes the lock of the connected peer's receive queue (its SRQ's
 * when it has one; shared-memory connections only), as a process inside its critical section
 * does: without `ms` for good (stop or kill this process to make it a stopped or dead
 * holder), with `ms` for that long more inside the call (running: this thread does nothing
 * else meanwhile), then it lets go.
 */
export function injectFault(qp: QueuePair, fault: Fault): void {
  if (!(qp instanceof QueuePair))
    throw invalid(`injectFault takes a QueuePair, got ${describe(qp)}`);
  if (!isPlainObject(fault)) throw invalid(`a fault must be an object, got ${describe(fault)}`);
  switch (fault.type) {
    case 'break-qp':
    case 'break-link':
      break;
    case 'stall-receiver':
      if (typeof fault.on !== 'boolean')
        throw invalid(`stall-receiver needs on: boolean, got ${describe(fault.on)}`);
      break;
    case 'delay':
      if (typeof fault.ms !== 'number' || !(fault.ms >= 0 && fault.ms <= 60_000))
        throw invalid(`delay needs ms in [0, 60000], got ${describe(fault.ms)}`);
      break;
    case 'hold-peer-lock':
      if (
        fault.ms !== undefined &&
        !(typeof fault.ms === 'number' && fault.ms > 0 && fault.ms <= 10_000)
      )
        throw invalid(`hold-peer-lock takes ms in (0, 10000] or none, got ${describe(fault.ms)}`);
      break;
    default:
      throw invalid(`unknown fault ${describe((fault as { type: unknown }).type)}`);
  }
  qp[kDriver].injectFault(fault);
}
