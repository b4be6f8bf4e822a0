import { WaiterList } from './Waiter.js';

/** The waiting sends of one channel, with its deficit-round-robin state. */
export class ChannelQueue {
  readonly waiters = new WaiterList();
  deficit = 0;
  /** True while the channel holds the current round-robin turn (quantum already added). */
  turn = false;
  inRing = false;

  constructor(readonly id: number) {}
}
