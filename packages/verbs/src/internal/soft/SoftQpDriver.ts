// A soft QP: shared memory to peers on this host, the TCP link to the others.
import type { LinkAddress, RouteOptions, SoftEndpoint } from '../../types.js';
import { ABI } from '../abi.js';
import { QP_STATE_CODE } from '../codes.js';
import type { Fault, QpDriver, QpHost } from '../driver.js';
import type { SoftEndpointBase, SoftNativeDevice } from '../native.js';
import { invalid } from '../validate.js';
import { checkSoftEndpoint, notListening } from './endpoint.js';
import { ATOMIC_REQUEST_BYTES, FrameBuffer, REQ_HEADER } from './link/frames.js';
import type { LinkTarget } from './link/handshake.js';
import { type LinkClient, type LinkOwner, SMALL_REQUEST } from './link/LinkClient.js';
import type { AcceptedLink, LinkEnd } from './link/LinkServer.js';
import type { SoftDeviceDriver } from './SoftDeviceDriver.js';

/** Payload bytes a QP keeps for frames on the link (beyond one WR of any size). */
const LINK_POOL_BYTES = 8 << 20;
/**
 * How long a QP that leaves the dialing to its peer (protocol 4) holds WRs for the peer's
 * connection before it dials one itself: bounded, so a peer that never dials (dead before
 * it connected) still fails the WRs within the ACK timeout and retries (DEAD_PEER_BOUND_MS).
 */
export const ADOPT_WAIT_MS = 300;

export class SoftQpDriver implements QpDriver, LinkEnd {
  readonly qpn: number;
  readonly granted = {};
  readonly #host: QpHost;
  readonly #device: SoftDeviceDriver;
  readonly #native: SoftNativeDevice;
  readonly #base: SoftEndpointBase;
  /** slot and generation of the QP's shared descriptor */
  readonly #slot: number;
  readonly #gen: number;
  #link: LinkClient | undefined;
  /** connected over the link (its connection may not exist yet: see #dialer) */
  #overLink = false;
  /**
   * It dials its peer (its link key is the lower, or its device does not listen); else it
   * adopts the connection its peer dials (protocol 4: one connection per QP pair), and
   * dials only once that one failed or did not come within ADOPT_WAIT_MS.
   */
  #dialer = true;
  #adoptTimer: NodeJS.Timeout | undefined;
  #adoptGaveUp = false;
  /** the remote QP's link address and identity, to reconnect after a failed connection */
  #linkAddress: LinkAddress | undefined;
  #linkTarget: LinkTarget | undefined;
  #linkHdr: Float64Array | undefined;
  /** the remote QP over the link (its requests are answered on this QP's connection) */
  #remotePid = -1;
  #remoteQpn = -1;
  /** frame buffers no socket reads now; with those in use, at most LINK_POOL_BYTES */
  readonly #linkFree: FrameBuffer[] = [];
  #linkPoolBytes = 0;
  #linkInUse = 0;
  /** onLink stopped for want of a buffer: a released one lets it go on */
  #linkStarved = false;
  readonly #linkOwner: LinkOwner = {
    answer: (token, outcome, status, rnrTimer, data, offset, length) => {
      if (this.#host.closed || this.#device.closed) return;
      // One word for the three (wire values: outcome and status bytes, RNR timer 16 bits).
      const word =
        (outcome |
          (status << ABI.LINK_DONE_STATUS_SHIFT) |
          (rnrTimer << ABI.LINK_DONE_RNR_SHIFT)) >>>
        0;
      const h = this.#host.handle;
      const more = data
        ? this.#native.linkDone(h, token, word, data, offset, length)
        : this.#native.linkDone(h, token, word);
      // The WRs it let go (behind it, or itself again): taken now, or none ready.
      if (more) this.onLink();
    },
    progress: () => {
      if (!this.#host.closed && !this.#device.closed) this.#native.linkProgress(this.#host.handle);
    },
    released: (frame) => {
      this.#linkInUse--;
      this.#linkFree.push(frame);
      if (this.#linkStarved) {
        this.#linkStarved = false;
        this.onLink();
      }
    },
  };

  /** onLink once the QP's frames left the socket (LinkClient.whenFramesOut). */
  readonly #framesOut = (): void => this.onLink();

  /** linkWrite for this QP (LinkClient.sendDirect): made once, not per frame. */
  readonly #linkWrite = (fd: number, buf: Buffer, headerBytes: number): number =>
    this.#native.linkWrite(this.#host.handle, fd, buf, headerBytes);

  constructor(
    host: QpHost,
    device: SoftDeviceDriver,
    native: SoftNativeDevice,
    base: SoftEndpointBase,
  ) {
    this.#host = host;
    this.#device = device;
    this.#native = native;
    this.#base = base;
    const { qpn, slot, gen } = native.qpInfo(host.handle);
    this.qpn = qpn;
    this.#slot = slot;
    this.#gen = gen;
  }

  get overLoop(): boolean {
    return this.#overLink;
  }

  endpoint(): SoftEndpoint {
    const b = this.#base;
    const tcp = this.#device.linkAddressFor({ slot: this.#slot, gen: this.#gen });
    return {
      provider: 'soft',
      transport: 'shm',
      qpn: this.qpn,
      psn: 0,
      bootId: b.bootId,
      pid: b.pid,
      segFd: b.segFd,
      bellFd: b.bellFd,
      nonce: b.nonce,
      slot: this.#slot,
      gen: this.#gen,
      ...(tcp ? { tcp } : {}),
    };
  }

  toInit(access: number): void {
    this.#host.transitioned(
      'init',
      this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.init, { access }),
    );
  }

  prepareRtr(remote: unknown, minRnr: number, route: RouteOptions): () => void {
    if (route.hopLimit !== undefined || route.sl !== undefined || route.trafficClass !== undefined)
      throw invalid('hopLimit, sl and trafficClass are options of the ibverbs provider');
    const ep = checkSoftEndpoint(remote);
    const h = this.#host.handle;
    if (this.#device.preferTcp || ep.bootId !== this.#base.bootId) {
      const tcp = ep.tcp;
      if (!tcp) throw notListening();
      const target = { slot: ep.slot, gen: ep.gen };
      const local = { slot: this.#slot, gen: this.#gen };
      const own = this.#device.linkAddressFor(local)?.key;
      // One of the pair dials (the same answer on both sides; a QP connected to itself dials).
      const dialer = own === undefined || own <= tcp.key;
      return () => {
        // Before the transition: it may throw.
        const link = dialer ? this.#device.linkClient(tcp, target, local) : undefined;
        const rc = this.#native.toRtrLink(h, {
          pid: ep.pid,
          slot: ep.slot,
          gen: ep.gen,
          qpn: ep.qpn,
          minRnrTimer: minRnr,
        });
        this.#host.transitioned('rtr', rc);
        this.#link = link;
        this.#overLink = true;
        this.#dialer = dialer;
        this.#adoptGaveUp = false;
        this.#linkAddress = tcp;
        this.#linkTarget = target;
        this.#remotePid = ep.pid;
        this.#remoteQpn = ep.qpn;
        this.#linkHdr ??= new Float64Array(ABI.LINK_WORDS);
        this.#device.linkConnected(this.#slot, this.#gen, this);
      };
    }
    return () => {
      const rc = this.#native.modifyQp(h, QP_STATE_CODE.rtr, {
        pid: ep.pid,
        segFd: ep.segFd,
        bellFd: ep.bellFd,
        slot: ep.slot,
        gen: ep.gen,
        qpn: ep.qpn,
        nonce: ep.nonce,
        minRnrTimer: minRnr,
      });
      this.#host.transitioned('rtr', rc);
      this.#link = undefined;
      this.#overLink = false;
    };
  }

  toRts(timeout: number, retryCount: number, rnrRetry: number): void {
    const rc = this.#native.modifyQp(this.#host.handle, QP_STATE_CODE.rts, {
      timeout,
      retryCount,
      rnrRetry,
    });
    this.#host.transitioned('rts', rc);
  }

  afterPost(): void {
    if (this.#overLink) this.onLink();
  }

  onReset(): void {
    this.#link = undefined;
    this.#overLink = false;
    clearTimeout(this.#adoptTimer);
    this.#adoptTimer = undefined;
    this.#device.linkLeft(this.#slot, this);
  }

  accepted(link: AcceptedLink): void {
    const addr = this.#linkAddress;
    if (!this.#overLink || !addr || this.#host.closed || this.#device.closed) return;
    const cur = this.#link;
    if (cur !== undefined && !cur.dead) return; // it has one (its own, or adopted)
    // Only a dialer that proved our peer's key carries our requests (protocol 4).
    if (!link.provesPeer(addr.key)) return;
    this.#link = this.#device.adoptedClient(link, cur);
    clearTimeout(this.#adoptTimer);
    this.#adoptTimer = undefined;
    this.onLink(); // WRs held for it
  }

  get client(): LinkClient | undefined {
    return this.#host.closed || this.#device.closed ? undefined : this.#link;
  }

  answerVia(srcPid: number, srcQpn: number): LinkClient | undefined {
    if (srcPid !== this.#remotePid || srcQpn !== this.#remoteQpn) return undefined;
    const link = this.client;
    // A connection that failed before it ever opened is no way back: answered where asked.
    if (!link || (link.dead && !link.opened)) return undefined;
    return this.#current();
  }

  /**
   * The connection to the remote QP, dialed again if the last one failed; undefined while
   * the QP waits for the one its peer dials (protocol 4, at most ADOPT_WAIT_MS).
   */
  #current(): LinkClient | undefined {
    let link = this.#link;
    if ((link === undefined || link.dead) && this.#linkAddress && this.#linkTarget) {
      if (link === undefined && !this.#dialer && !this.#adoptGaveUp) {
        this.#adoptTimer ??= setTimeout(this.#stopWaiting, ADOPT_WAIT_MS);
        return undefined;
      }
      // Resent after a failed connection go over a new one (the target answers WRs it
      // already ran from memory).
      link = this.#device.linkClient(this.#linkAddress, this.#linkTarget, {
        slot: this.#slot,
        gen: this.#gen,
      });
      this.#link = link;
    }
    return link;
  }

  /** The peer's connection did not come in time: this QP dials its own. */
  readonly #stopWaiting = (): void => {
    this.#adoptTimer = undefined;
    if (this.#link !== undefined || !this.#overLink) return;
    this.#adoptGaveUp = true;
    this.onLink();
  };

  /**
   * Sends what the native side has ready for the TCP link: the head WR and those behind it
   * (the native side bounds how many), in one system call. Each frame (header, then the
   * payload gathered natively) is a buffer of the QP's pool that the socket reads until
   * written; their bytes are bounded by LINK_POOL_BYTES (one WR always goes, whatever its
   * size). A WR costs at most two takes: a refused one says how large a buffer it needs.
   */
  onLink(): void {
    const hdr = this.#linkHdr;
    if (!this.#overLink || !hdr || this.#host.closed || this.#device.closed) return;
    const link = this.#current();
    if (link === undefined) return; // held until the peer's connection comes
    const h = this.#host.handle;
    link.beginBatch();
    try {
      // Payload bytes the next WR needs, once a take said (0: not known yet).
      let need = 0;
      for (;;) {
        if (need === 0 && link.open) {
          // Small: gathered straight into the connection's Outbox, beside the answers
          // waiting there, and written with them at endBatch (one write).
          // Its header is written natively, and when it is the last WR to take now and
          // nothing of ours waits in node's stream, the take sends it with the answers
          // before it too: one crossing for take, header and send.
          const out = link.out;
          const b = out.reserve(REQ_HEADER + SMALL_REQUEST);
          const fd = link.sendFd();
          const settles = fd >= 0 && link.settles;
          hdr[ABI.LINK_IN_REQ_ID] = link.nextReqId;
          hdr[ABI.LINK_IN_SEND_FD] = fd + 1;
          hdr[ABI.LINK_IN_SEND_MAX] = link.maxPayload;
          hdr[ABI.LINK_IN_SETTLES] = settles ? 1 : 0;
          const taken = this.#native.linkTake(h, hdr, b, out.at + REQ_HEADER, SMALL_REQUEST, false);
          if (taken === ABI.LINK_TAKE_NONE) return;
          if (taken !== ABI.LINK_TAKE_NEEDS_BUFFER) {
            link.sendGathered(hdr, this.#linkOwner, true, settles);
            if (taken === ABI.LINK_TAKE_LAST) return;
            continue;
          }
          need = hdr[ABI.LINK_LENGTH] as number;
          if (need > SMALL_REQUEST && hdr[ABI.LINK_HEAD] === 0 && link.framesQueued) {
            // Behind a WR on the wire (its ACK timer runs) and frames of ours still in the
            // socket: taken when they are out, then straight from memory, not copied now
            // only to wait behind them.
            link.whenFramesOut(this.#framesOut);
            return;
          }
        }
        const frame = this.#frameFor(need);
        if (frame === undefined) {
          this.#linkStarved = true;
          return; // taken when a frame in flight leaves the socket
        }
        // Larger than SMALL_REQUEST (a WRITE or SEND): its payload goes from the registered
        // memory straight into the socket when nothing of ours is queued there; the frame
        // then takes only what the kernel did not.
        const fd = need > SMALL_REQUEST ? link.directFd() : -1;
        // No header and no send of its own here, whatever a refused call left in the words.
        hdr[ABI.LINK_IN_REQ_ID] = 0;
        hdr[ABI.LINK_IN_SEND_FD] = 0;
        const taken = this.#native.linkTake(h, hdr, frame.buf, REQ_HEADER, undefined, fd >= 0);
        if (taken !== ABI.LINK_TAKE_READY && taken !== ABI.LINK_TAKE_LAST) {
          this.#linkFree.push(frame);
          if (taken === ABI.LINK_TAKE_NONE) return;
          need = hdr[ABI.LINK_LENGTH] as number; // too small: one that large next
          continue;
        }
        need = 0;
        this.#linkInUse++;
        if (fd >= 0) link.sendDirect(hdr, frame, this.#linkOwner, fd, this.#linkWrite);
        else link.send(hdr, frame, this.#linkOwner);
        if (taken === ABI.LINK_TAKE_LAST) return;
      }
    } finally {
      link.endBatch();
    }
  }

  /**
   * A free frame for `need` payload bytes (any when 0), or undefined while frames in flight
   * hold the pool: a frame too small is replaced by one that large within LINK_POOL_BYTES.
   */
  #frameFor(need: number): FrameBuffer | undefined {
    const free = this.#linkFree;
    for (let i = free.length - 1; i >= 0; i--) {
      const f = free[i] as FrameBuffer;
      if (f.capacity >= need) {
        free[i] = free[free.length - 1] as FrameBuffer;
        free.pop();
        return f;
      }
    }
    if (need === 0) return this.#newFrame(ATOMIC_REQUEST_BYTES);
    const old = free[free.length - 1];
    const freed = old === undefined ? 0 : old.capacity;
    if (this.#linkInUse > 0 && this.#linkPoolBytes - freed + need > LINK_POOL_BYTES)
      return undefined;
    if (old !== undefined) {
      free.pop();
      this.#linkPoolBytes -= freed; // replaced by a larger one
    }
    return this.#newFrame(need);
  }

  #newFrame(payloadBytes: number): FrameBuffer {
    this.#linkPoolBytes += payloadBytes;
    return new FrameBuffer(payloadBytes);
  }

  injectFault(fault: Fault): void {
    const h = this.#host.handle;
    if (fault.type === 'break-qp') this.#host.toError();
    else if (fault.type === 'break-link') this.#native.inject(h, ABI.FAULT_BREAK_LINK, 0);
    else if (fault.type === 'stall-receiver')
      this.#native.inject(h, ABI.FAULT_STALL_RECEIVER, fault.on ? 1 : 0);
    else if (fault.type === 'hold-peer-lock')
      this.#native.inject(h, ABI.FAULT_HOLD_PEER_LOCK, fault.ms ?? 0);
    else this.#native.inject(h, ABI.FAULT_DELAY, fault.ms);
  }
}
