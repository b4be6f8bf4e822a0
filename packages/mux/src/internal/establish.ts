import { parseFlowParams } from '@rdmajs/flowctl';
import {
  MuxAbortError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxProtocolError,
} from '../errors.js';
import { type ControlLink, ControlType } from './ControlLink.js';
import type { PeerResources } from './PeerResources.js';
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
    link.destroy();
    throw err;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

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
