import type { Channel, InboundMessage, MessagePart } from '@rdmajs/mux';
import type { RequestSlots } from './RequestSlots.js';

/** Settles one sent reply's call: reused from reply to reply. */
interface Settler {
  msg: InboundMessage | undefined;
  readonly done: () => void;
}

const SEND_OPTIONS = { transfer: true } as const;

/**
 * The replies of one data channel, sent so that a burst costs the transport few posts: the
 * first reply of an event-loop turn goes at once (a lone call's latency is untouched), the
 * others of that turn together once its callbacks and their promise jobs ran (setImmediate),
 * so the transport posts them as one batch (one RDMA post and peer wake-up) instead of one per
 * reply or per promise job that produced one. Each call's slot and request message are given
 * back once its reply went out (or failed).
 */
export class ReplyBatch {
  readonly #ch: Pick<Channel, 'send'>;
  readonly #slots: Pick<RequestSlots, 'give'>;
  /** A reply went out this turn: later ones wait for its end. */
  #turn = false;
  // Waiting replies, filled by index and never truncated (a reset length frees the store and
  // the next fill allocates one); sent entries are cleared so nothing stays referenced.
  readonly #parts: (MessagePart[] | undefined)[] = [];
  readonly #msgs: (InboundMessage | undefined)[] = [];
  #n = 0;
  /** Settlers of replies sent and settled, for the next ones. */
  readonly #settlers: Settler[] = [];
  readonly #endTurn = (): void => {
    const parts = this.#parts;
    const msgs = this.#msgs;
    // send() settles later, never synchronously into add(): the arrays stay this turn's.
    for (let i = 0; i < this.#n; i++) {
      this.#send(parts[i] as MessagePart[], msgs[i] as InboundMessage);
      parts[i] = undefined;
      msgs[i] = undefined;
    }
    this.#n = 0;
    this.#turn = false;
  };

  constructor(ch: Pick<Channel, 'send'>, slots: Pick<RequestSlots, 'give'>) {
    this.#ch = ch;
    this.#slots = slots;
  }

  /** A call's response (undefined: nothing to answer) for request `msg`. */
  add(parts: MessagePart[] | undefined, msg: InboundMessage): void {
    if (parts === undefined) {
      this.settle(msg);
      return;
    }
    if (this.#turn) {
      this.#parts[this.#n] = parts;
      this.#msgs[this.#n++] = msg;
      return;
    }
    this.#turn = true;
    setImmediate(this.#endTurn);
    this.#send(parts, msg);
  }

  /** The call is over: its request message and slot are given back. */
  settle(msg: InboundMessage): void {
    msg.release();
    this.#slots.give();
  }

  #send(parts: MessagePart[], msg: InboundMessage): void {
    // A settler made once and reused (no closure per reply); as many exist as replies were
    // ever in flight at once, which the request slots bound.
    const s = this.#settlers.pop() ?? this.#settler();
    s.msg = msg;
    // Reply blocks belong to the response: the transport releases them once sent.
    this.#ch.send(parts, SEND_OPTIONS).then(s.done, s.done);
  }

  #settler(): Settler {
    const s: Settler = {
      msg: undefined,
      done: () => {
        const m = s.msg as InboundMessage;
        s.msg = undefined;
        this.#settlers.push(s);
        this.settle(m);
      },
    };
    return s;
  }
}
