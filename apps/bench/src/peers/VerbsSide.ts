import {
  Access,
  allocCompletions,
  type CompletionQueue,
  type Device,
  type MemoryRegion,
  openDevice,
  type QueuePair,
  type WorkCompletion,
} from '@rdmajs/verbs';

export const QUEUE_DEPTH = 64;
/** Signal one send in this many, so the send queue is reaped without a completion per op. */
export const SIGNAL_EVERY = 16;

/** One end of a verbs ping-pong: device, one registered buffer, one CQ, one QP. */
export class VerbsSide {
  readonly dev: Device;
  readonly mr: MemoryRegion;
  readonly cq: CompletionQueue;
  readonly qp: QueuePair;
  readonly wcs: WorkCompletion[] = allocCompletions(32);

  constructor(provider: 'soft' | 'ibverbs', bytes: number, link?: 'tcp') {
    this.dev = openDevice(link === undefined ? { provider } : { provider, link });
    const pd = this.dev.allocPd();
    this.mr = pd.allocMr(bytes, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead);
    this.cq = this.dev.createCq({ capacity: 4 * QUEUE_DEPTH });
    this.qp = pd.createQp({
      sendCq: this.cq,
      recvCq: this.cq,
      maxSendWr: QUEUE_DEPTH,
      maxRecvWr: QUEUE_DEPTH,
      maxSendSge: 1,
      maxRecvSge: 1,
      maxInlineData: 64,
    });
    this.qp.toInit(); // receives may be posted from init on
  }

  /** Soft over its TCP link: accept the peer's link; endpoints made after carry the address. */
  async listen(): Promise<void> {
    await this.dev.listen();
  }

  close(): void {
    this.dev.close();
  }
}
