// Mutual authentication of a soft TCP link: HMAC-SHA256 challenge–response over the
// listening device's secret, which travels only out of band inside its endpoints (never
// on this wire). Nothing a peer sends is acted on before it has proven the secret, and
// the initiator sends nothing of its QPs' data before the target has proven it too.
//
//   target → initiator  HELLO   magic u32, version u16, pad u16, maxPayload u32, nonceT[32]
//   initiator → target  AUTH    magic u32, version u16, pad u16, nonceI[32], mac[32]
//                               mac = HMAC(secret, "rdmajs-link-1 initiator" | nonceT | nonceI)
//   target → initiator  WELCOME magic u32, version u16, pad u16, mac[32]
//                               mac = HMAC(secret, "rdmajs-link-1 target" | nonceI | nonceT)
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const LINK_MAGIC = 0x4b4c4452; // 'RDLK'
export const LINK_VERSION = 1;
export const HELLO_BYTES = 44;
export const AUTH_BYTES = 72;
export const WELCOME_BYTES = 40;
/** A peer that has not authenticated within this is dropped. */
export const HANDSHAKE_DEADLINE_MS = 5000;
export const SECRET_BYTES = 32;

function mac(secret: Buffer, role: 'initiator' | 'target', a: Buffer, b: Buffer): Buffer {
  return createHmac('sha256', secret).update(`rdmajs-link-1 ${role}`).update(a).update(b).digest();
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

/** The target's side: a challenge, then the check of the initiator's answer. */
export class TargetHandshake {
  readonly #secret: Buffer;
  readonly #nonce = randomBytes(32);

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

  /** The WELCOME to send when `auth` proves the secret; undefined otherwise. */
  verify(auth: Buffer): Buffer | undefined {
    if (auth.length !== AUTH_BYTES || !hasPreamble(auth)) return undefined;
    const nonceI = auth.subarray(8, 40);
    const expected = mac(this.#secret, 'initiator', this.#nonce, nonceI);
    if (!timingSafeEqual(expected, auth.subarray(40, 72))) return undefined;
    const w = Buffer.alloc(WELCOME_BYTES);
    preamble(w);
    mac(this.#secret, 'target', nonceI, this.#nonce).copy(w, 8);
    return w;
  }
}

/** The initiator's side: the answer to a HELLO, then the check of the WELCOME. */
export class InitiatorHandshake {
  readonly #secret: Buffer;
  readonly #nonce = randomBytes(32);
  #nonceT: Buffer | undefined;
  /** What the target accepts per frame, from its HELLO. */
  maxPayload = 0;

  constructor(secret: Buffer) {
    this.#secret = secret;
  }

  /** The AUTH answering `hello`; undefined when it is no HELLO of this protocol. */
  answer(hello: Buffer): Buffer | undefined {
    if (hello.length !== HELLO_BYTES || !hasPreamble(hello)) return undefined;
    this.maxPayload = hello.readUInt32LE(8);
    this.#nonceT = Buffer.from(hello.subarray(12, 44));
    const a = Buffer.alloc(AUTH_BYTES);
    preamble(a);
    this.#nonce.copy(a, 8);
    mac(this.#secret, 'initiator', this.#nonceT, this.#nonce).copy(a, 40);
    return a;
  }

  /** True when `welcome` proves the target knows the secret. */
  verify(welcome: Buffer): boolean {
    if (!this.#nonceT || welcome.length !== WELCOME_BYTES || !hasPreamble(welcome)) return false;
    const expected = mac(this.#secret, 'target', this.#nonce, this.#nonceT);
    return timingSafeEqual(expected, welcome.subarray(8, 40));
  }
}
