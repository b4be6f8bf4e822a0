import type { InboundMessage, MessagePart } from '@rdmajs/mux';
import { describe, expect, it } from 'vitest';
import { ReplyBatch } from '../src/internal/ReplyBatch.js';

/** A channel that records what is sent when, and settles each send when told. */
function fakeChannel() {
  const sent: number[] = [];
  const settle: ((ok: boolean) => void)[] = [];
  const ch = {
    send(parts: MessagePart | MessagePart[]): Promise<void> {
      sent.push(((parts as Uint8Array[])[0] as Uint8Array)[0] as number);
      return new Promise<void>((resolve, reject) =>
        settle.push((ok) => (ok ? resolve() : reject(new Error('lost')))),
      );
    },
  };
  return { ch, sent, settle };
}

function message(log: number[], id: number): InboundMessage {
  return { release: () => log.push(id) } as unknown as InboundMessage;
}

const turn = () => new Promise((r) => setImmediate(r));

describe('ReplyBatch', () => {
  it('first_reply_of_a_turn_goes_at_once_the_rest_together_at_the_turn_end_in_order', async () => {
    const { ch, sent, settle } = fakeChannel();
    const released: number[] = [];
    let given = 0;
    const batch = new ReplyBatch(ch, { give: () => given++ });
    batch.add([Uint8Array.of(1)], message(released, 1));
    expect(sent).toEqual([1]); // a lone reply waits for nothing
    batch.add([Uint8Array.of(2)], message(released, 2));
    batch.add([Uint8Array.of(3)], message(released, 3));
    expect(sent).toEqual([1]);
    await turn();
    expect(sent).toEqual([1, 2, 3]); // the rest in one synchronous burst, in order
    // Nothing is given back before its send settled, whether it went or failed.
    expect(released).toEqual([]);
    expect(given).toBe(0);
    settle[1]?.(false);
    settle[0]?.(true);
    settle[2]?.(true);
    await turn();
    expect(released.sort()).toEqual([1, 2, 3]);
    expect(given).toBe(3);
    // The next turn starts afresh: its first reply goes at once again.
    batch.add([Uint8Array.of(4)], message(released, 4));
    expect(sent).toEqual([1, 2, 3, 4]);
  });

  it('a_call_with_nothing_to_answer_gives_its_slot_and_message_back_at_once', () => {
    const { ch, sent } = fakeChannel();
    const released: number[] = [];
    let given = 0;
    const batch = new ReplyBatch(ch, { give: () => given++ });
    batch.add(undefined, message(released, 9));
    expect(sent).toEqual([]);
    expect(released).toEqual([9]);
    expect(given).toBe(1);
  });
});
