// Mutual authentication of a soft TCP link connection, bound to one target QP. The
// listening device keeps a secret that never leaves it; each of its QPs' endpoints
// carries that QP's link key, K = HMAC(secret, "rdmajs-link-2 qp" | slot | gen), out of
// band (never on this wire). A connection proves K for one (slot, gen) and may then speak
// only to that QP incarnation: a peer given the endpoint of one QP cannot reach another
// QP of the device, nor speak for the peer that QP is connected to. Nothing a peer sends
// is acted on before it has proven K, and the initiator sends nothing of its QP's data
// before the target has proven K too.
//
// Link protocol 4 carries both QPs of a pair on one connection (frames.ts): the initiator
// also proves its own QP's key KI (from its own endpoint, which the target QP holds as its
// remote's), so the target QP may send its own requests on the connection — to its RC peer
// and no one else — instead of dialing a second one.
//
// Link protocol 5: a request's flags carry the WR's IBV_SEND_SOLICITED (frames.ts). A protocol 4
// peer would drop such frames as malformed, and its own would leave every solicited-only wait
// asleep here: the two refuse each other at the HELLO/AUTH (version) instead.
//
// Link protocol 6: tokens run 1 … 2^32 − 1 and then 1 again (frames.ts, nextLinkToken); a
// protocol 5 target expected 0 after 2^32 − 1 (and 0 means none), which an initiator crosses
// after 16 WRs now that send sequences start below 2^32 (native soft/device.h).
//
//   target → initiator  HELLO   magic u32, version u16, pad u16, maxPayload u32, nonceT[32]
//   initiator → target  AUTH    magic u32, version u16, pad u16, slot u32, gen u32,
//                               nonceI[32], mac[32], maxPayloadI u32, peerMac[32]
//                               mac = HMAC(K, "rdmajs-link-2 initiator" | nonceT | nonceI)
//                               peerMac = HMAC(KI, "rdmajs-link-4 peer" | nonceT | nonceI)
//                               (zeros when the initiator's device does not listen: it
//                               has no KI, and the target never sends requests its way)
//   target → initiator  WELCOME magic u32, version u16, pad u16, mac[32]
//                               mac = HMAC(K, "rdmajs-link-2 target" | nonceI | nonceT)
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const LINK_MAGIC = 0x4b4c4452; // 'RDLK'
export const LINK_VERSION = 6;
export const HELLO_BYTES = 44;
export const AUTH_BYTES = 116;
export const WELCOME_BYTES = 40;
/** A peer that has not authenticated within this is dropped. */
export const HANDSHAKE_DEADLINE_MS = 5000;
export const SECRET_BYTES = 32;

function mac(key: Buffer, role: 'initiator' | 'target', a: Buffer, b: Buffer): Buffer {
  return createHmac('sha256', key).update(`rdmajs-link-2 ${role}`).update(a).update(b).digest();
}

/** The initiator's proof of its own QP's key KI (protocol 4). */
function peerMac(key: Buffer, nonceT: Buffer, nonceI: Buffer): Buffer {
  return createHmac('sha256', key)
    .update('rdmajs-link-4 peer')
    .update(nonceT)
    .update(nonceI)
    .digest();
}

/** The QP the connection speaks to: its descriptor slot and generation. */
export interface LinkTarget {
  slot: number;
  gen: number;
}

/** The link key of one QP incarnation of the device whose secret is `secret`. */
export function qpLinkKey(secret: Buffer, target: LinkTarget): Buffer {
  const id = Buffer.alloc(8);
  id.writeUInt32LE(target.slot, 0);
  id.writeUInt32LE(target.gen, 4);
  return createHmac('sha256', secret).update('rdmajs-link-2 qp').update(id).digest();
}

function preamble(b: Buffer): void {
  b.writeUInt32LE(LINK_MAGIC, 0);
  b.writeUInt16LE(LINK_VERSION, 4);
  b.writeUInt16LE(0, 6);
}

/** False as soon as the first bytes of a handshake message cannot be this protocol's. */
export function couldBePreamble(b: Buffer): boolean {
  if (b.length >= 4 && b.readUInt32LE(0) !== LINK_MAGIC) return false;
  return b.length < 6 || b.readUInt16LE(4) === LINK_VERSION;
}

function hasPreamble(b: Buffer): boolean {
  return b.readUInt32LE(0) === LINK_MAGIC && b.readUInt16LE(4) === LINK_VERSION;
}

export function newSecret(): Buffer {
  return randomBytes(SECRET_BYTES);
}

/** What a target accepts: the WELCOME to send, and the one QP the connection may reach. */
export interface Accepted {
  welcome: Buffer;
  target: LinkTarget;
  /** What the initiator accepts per frame (requests sent its way stay within it). */
  peerMaxPayload: number;
  /** True when the initiator proved `key` (base64url): the key of the target QP's RC peer. */
  provesPeer(key: string): boolean;
}

/** The target's side: a challenge, then the check of the initiator's answer. */
export class TargetHandshake {
  readonly #secret: Buffer;
  readonly #nonce = randomBytes(32);

  /** `secret`: the listening device's, from which every QP's key is derived. */
  constructor(secret: Buffer) {
    this.#secret = secret;
  }

  hello(maxPayload: number): Buffer {
    const b = Buffer.alloc(HELLO_BYTES);
    preamble(b);
    b.writeUInt32LE(maxPayload, 8);
    this.#nonce.copy(b, 12);
    return b;
  }

  /** Accepted when `auth` proves the key of the QP it names; undefined otherwise. */
  verify(auth: Buffer): Accepted | undefined {
    if (auth.length !== AUTH_BYTES || !hasPreamble(auth)) return undefined;
    const target = { slot: auth.readUInt32LE(8), gen: auth.readUInt32LE(12) };
    const key = qpLinkKey(this.#secret, target);
    const nonceI = auth.subarray(16, 48);
    const expected = mac(key, 'initiator', this.#nonce, nonceI);
    if (!timingSafeEqual(expected, auth.subarray(48, 80))) return undefined;
    const welcome = Buffer.alloc(WELCOME_BYTES);
    preamble(welcome);
    mac(key, 'target', nonceI, this.#nonce).copy(welcome, 8);
    const nonceT = this.#nonce;
    const nI = Buffer.from(nonceI);
    const proof = Buffer.from(auth.subarray(84, 116));
    return {
      welcome,
      target,
      peerMaxPayload: auth.readUInt32LE(80),
      provesPeer: (k: string) =>
        timingSafeEqual(peerMac(Buffer.from(k, 'base64url'), nonceT, nI), proof),
    };
  }
}

/** The initiator's side: the answer to a HELLO, then the check of the WELCOME. */
export class InitiatorHandshake {
  readonly #key: Buffer;
  readonly #target: LinkTarget;
  readonly #nonce = randomBytes(32);
  #nonceT: Buffer | undefined;
  /** What the target accepts per frame, from its HELLO. */
  maxPayload = 0;

  readonly #ownKey: Buffer | undefined;
  readonly #ownMaxPayload: number;

  /**
   * `key`: the target QP's link key, from its endpoint (`tcp.key`); `ownKey`: the dialing
   * QP's own (undefined when its device does not listen) and what it accepts per frame.
   */
  constructor(key: Buffer, target: LinkTarget, ownKey?: Buffer, ownMaxPayload = 0) {
    this.#key = key;
    this.#target = target;
    this.#ownKey = ownKey;
    this.#ownMaxPayload = ownMaxPayload;
  }

  /** The AUTH answering `hello`; undefined when it is no HELLO of this protocol. */
  answer(hello: Buffer): Buffer | undefined {
    if (hello.length !== HELLO_BYTES || !hasPreamble(hello)) return undefined;
    this.maxPayload = hello.readUInt32LE(8);
    this.#nonceT = Buffer.from(hello.subarray(12, 44));
    const a = Buffer.alloc(AUTH_BYTES);
    preamble(a);
    a.writeUInt32LE(this.#target.slot, 8);
    a.writeUInt32LE(this.#target.gen, 12);
    this.#nonce.copy(a, 16);
    mac(this.#key, 'initiator', this.#nonceT, this.#nonce).copy(a, 48);
    a.writeUInt32LE(this.#ownMaxPayload, 80);
    if (this.#ownKey) peerMac(this.#ownKey, this.#nonceT, this.#nonce).copy(a, 84);
    return a;
  }

  /** True when `welcome` proves the target knows the secret. */
  verify(welcome: Buffer): boolean {
    if (!this.#nonceT || welcome.length !== WELCOME_BYTES || !hasPreamble(welcome)) return false;
    const expected = mac(this.#key, 'target', this.#nonce, this.#nonceT);
    return timingSafeEqual(expected, welcome.subarray(8, 40));
  }
}
