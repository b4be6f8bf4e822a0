// Module-private keys: members the package's classes use on each other. They are not
// exported from the package, so users cannot reach these members.
import { RdmaError } from '../errors.js';

/** Passed to constructors by the factory methods (`device.createCq()`, …). */
export const kCreate: unique symbol = Symbol('rdmajs.create');
/** The native handle of a CQ or SRQ. */
export const kHandle: unique symbol = Symbol('rdmajs.handle');
/** A QP starts (+1) or stops (−1) using a CQ or SRQ. */
export const kUse: unique symbol = Symbol('rdmajs.use');
/**
 * A QP whose completions arrive only through this process's event loop (soft over the TCP
 * link) starts (+1) or stops (−1) feeding a CQ: a CQ fed only so gains nothing by spinning.
 */
export const kLoopFed: unique symbol = Symbol('rdmajs.loopFed');
/** Async notifications from the device: doorbell, overrun, fatal, limit. */
export const kNotify: unique symbol = Symbol('rdmajs.notify');
/** The QP's provider driver (fault injection in `@rdmajs/verbs/testing`). */
export const kDriver: unique symbol = Symbol('rdmajs.driver');

/** A SendWrList's packed records (read by QueuePair.postSendList, written only by the list). */
export const kWords: unique symbol = Symbol('rdmajs.words');

/** Refuses construction other than through the package's factories. */
export function checkCreate(key: unknown, factory: string): void {
  if (key !== kCreate) {
    throw new RdmaError(
      'ERR_RDMA_INVALID_ARG',
      `use ${factory}: this class is not constructed directly`,
    );
  }
}
