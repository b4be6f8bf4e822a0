import type { RdmaConnectionSettings } from '../RdmaConnection.js';
import { ABLATE_CREDITS, ABLATE_SEND_WINDOW } from './RdmaSetup.js';

/**
 * Credits of a connection with the 'credits' ablation, both ways: more than any run spends,
 * so the sender never waits for one and the receiver never refuses a SEND for lack of one
 * (flowctl's bookkeeping runs unchanged; it no longer bounds anything). The buffers actually
 * posted stay the lease of the shared pool: a SEND that finds none is RNR-retried by the NIC.
 */
const UNMETERED_CREDITS = 2 ** 30;
/** The most one header returns (u16): an explicit update only by the flush delay, in practice. */
const UNMETERED_RETURN_THRESHOLD = 0xffff;
/** A window of the 'send-window' ablation: no bound either side enforces. */
const UNBOUNDED = Number.MAX_SAFE_INTEGER;

/**
 * The settings of a connection whose two sides agreed to switch lessons off (ABLATE_* bits),
 * for measurement only. Everything is decided here, once per connection: the data path runs
 * the same code (no branch per message), against bounds that no longer bind.
 */
export function ablatedSettings(s: RdmaConnectionSettings, bits: number): RdmaConnectionSettings {
  let out = s;
  if ((bits & ABLATE_CREDITS) !== 0) {
    out = {
      ...out,
      sendCredits: {
        initialCredits: UNMETERED_CREDITS,
        reservedCredits: 1,
        maxCredits: UNMETERED_CREDITS,
      },
      receiveCredits: {
        initialCredits: UNMETERED_CREDITS,
        reservedCredits: 1,
        returnThreshold: UNMETERED_RETURN_THRESHOLD,
      },
    };
  }
  if ((bits & ABLATE_SEND_WINDOW) !== 0) {
    const open = { windowBytes: UNBOUNDED, windowMessages: UNBOUNDED };
    out = {
      ...out,
      // The receiver checks arrivals against `local`, the sender's window is `peer` ∧ its cap.
      local: { ...out.local, ...open },
      peer: { ...out.peer, ...open },
      maxSendWindow: { maxBytes: UNBOUNDED, maxMessages: UNBOUNDED },
      budget: undefined,
    };
  }
  return out;
}
