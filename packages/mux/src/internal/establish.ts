import { parseFlowParams } from '@rdmajs/flowctl';
import {
  MuxAbortError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxHandshakeError,
  MuxProtocolError,
} from '../errors.js';
import { type ControlLink, ControlType } from './ControlLink.js';
import type { PeerResources } from './PeerResources.js';
import { ablationNames } from './RdmaOptions.js';
import {
  decodeRdmaSetup,
  encodeRdmaSetup,
  type RdmaSetup,
  type SetupFlowParams,
} from './RdmaSetup.js';
import { WIRE_HEADER_BYTES } from './WireHeader.js';

/** What one side announces in its setup, besides its endpoints. */
export interface LocalSetup {
  recvBufferBytes: number;
  recvBufferCount: number;
  flow: SetupFlowParams;
  /** ABLATE_* bits: the peer must announce the same. */
  ablations: number;
  /** This transport's incarnation (its read-region descriptors carry it). */
  incarnation: bigint;
}

/** The outcome: the peer's validated setup and our QPs connected to it. */
export interface Established {
  peer: RdmaSetup;
  resources: PeerResources;
}

/**
 * After the handshake: exchanges RdmaSetup on the control connection (client first; the
 * server answers with as many QPs as the client offered), connects the QP pool, then
 * exchanges Ready, so neither side posts to a QP the peer has not yet brought up. Bounded
 * by `timeoutMs` and `signal`; on failure everything made is closed and the error is typed.
 */
export async function establish(
  link: ControlLink,
  role: 'client' | 'server',
  local: LocalSetup,
  makeResources: (qpCount: number) => PeerResources,
  qpCount: number,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<Established> {
  const inbox: Array<[ControlType, Uint8Array]> = [];
  let wake: (() => void) | undefined;
  let failure: Error | undefined;
  link.setHandlers({
    message: (type, payload) => {
      if (type === ControlType.Ping) return;
      inbox.push([type, payload]);
      wake?.();
    },
    closed: (cause) => {
      failure ??=
        cause instanceof MuxError
          ? cause
          : new MuxConnectionError(
              'ERR_MUX_CONNECTION_LOST',
              `setup (${role}): the peer closed the connection`,
              cause,
            );
      wake?.();
    },
    ended: () => {
      failure ??= new MuxConnectionError(
        'ERR_MUX_CONNECTION_LOST',
        `setup (${role}): the peer ended the connection`,
      );
      wake?.();
    },
  });
  const timer = setTimeout(() => {
    failure ??= new MuxDeadlineError(`rdma setup (${role})`, timeoutMs);
    wake?.();
  }, timeoutMs);
  const onAbort = () => {
    failure ??= new MuxAbortError(`rdma setup (${role})`, signal?.reason);
    wake?.();
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  const next = async (want: ControlType): Promise<Uint8Array> => {
    for (;;) {
      if (failure !== undefined) throw failure;
      const m = inbox.shift();
      if (m !== undefined) {
        if (m[0] !== want)
          throw new MuxProtocolError(`setup (${role}): control message ${m[0]}, expected ${want}`);
        return m[1];
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
  };
  let resources: PeerResources | undefined;
  try {
    if (signal?.aborted === true) onAbort();
    let peer: RdmaSetup;
    if (role === 'client') {
      resources = makeResources(qpCount);
      link.send(ControlType.Setup, encodeRdmaSetup({ ...local, endpoints: resources.endpoints() }));
      peer = checkPeer(decodeRdmaSetup(await next(ControlType.Setup)), local);
      if (peer.endpoints.length !== qpCount) {
        throw new MuxProtocolError(
          `setup: the server answered ${peer.endpoints.length} QPs for ${qpCount}`,
        );
      }
    } else {
      peer = checkPeer(decodeRdmaSetup(await next(ControlType.Setup)), local);
      resources = makeResources(peer.endpoints.length);
      link.send(ControlType.Setup, encodeRdmaSetup({ ...local, endpoints: resources.endpoints() }));
    }
    // After the exchange, so each side learns the other's choice and fails with the same code.
    checkAblations(peer, local, role);
    try {
      resources.connect(peer.endpoints);
    } catch (cause) {
      throw new MuxError(
        'ERR_MUX_PROTOCOL',
        `setup: cannot connect to the peer's QPs: ${(cause as Error).message}`,
        {
          cause,
        },
      );
    }
    link.send(ControlType.Ready);
    await next(ControlType.Ready);
    return { peer, resources };
  } catch (err) {
    resources?.close();
    // A disagreement ends the link once our Setup is out: the peer reads it and says why too.
    if (err instanceof MuxError && err.code === 'ERR_MUX_ABLATION') endSoon(link);
    else link.destroy();
    throw err;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Both sides must switch off the same lessons (a measurement of one, never a silent mix). */
function checkAblations(peer: RdmaSetup, local: LocalSetup, role: 'client' | 'server'): void {
  if (peer.ablations === local.ablations) return;
  const names = (bits: number) => ablationNames(bits).join(', ') || 'none';
  throw new MuxHandshakeError(
    'ERR_MUX_ABLATION',
    `setup (${role}): this side switched off ${names(local.ablations)}, the peer ${names(peer.ablations)}; both must agree`,
  );
}

/** Ends the link (what was sent goes first), and destroys it if the peer does not close it soon. */
function endSoon(link: ControlLink): void {
  link.end();
  setTimeout(() => link.destroy(), ABLATION_LINGER_MS).unref();
}

/** How long a link refused for an ablation mismatch waits for the peer to close it. */
const ABLATION_LINGER_MS = 1_000;

/** What the peer announced must fit what this side will send into its buffers. */
function checkPeer(peer: RdmaSetup, local: LocalSetup): RdmaSetup {
  try {
    parseFlowParams(peer.flow);
  } catch (cause) {
    throw new MuxError(
      'ERR_MUX_PROTOCOL',
      `setup: bad flow parameters: ${(cause as Error).message}`,
      { cause },
    );
  }
  const eager = Math.min(local.flow.maxMessageBytes, peer.flow.maxMessageBytes);
  if (peer.recvBufferBytes < WIRE_HEADER_BYTES + Math.max(eager, 255)) {
    throw new MuxProtocolError(
      `setup: receive buffers of ${peer.recvBufferBytes} bytes are too small`,
    );
  }
  return peer;
}
