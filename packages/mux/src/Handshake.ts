import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { MuxError, MuxHandshakeError } from './errors.js';
import type { SharedSecret } from './Transport.js';

/** 'RDMX', big-endian, at the start of every handshake message. */
export const HANDSHAKE_MAGIC = 0x52444d58;
/**
 * The wire protocol this package speaks (handshake and frames). 2: proofs bind the whole
 * transcript (limits included) and the RDMA control connection is sealed with session keys.
 * 3: RDMA receive credits are leases from a shared receive pool (setup v2, LeaseReturn).
 * 4: every RDMA SEND is solicited, and a sleeping side arms for solicited completions only
 * (a version-3 peer's plain SENDs would never wake it).
 * 5: RDMA setup v3 (transport incarnation, a dedicated read QP for one-sided reads). Bumped so a
 * version-4 peer (setup v2) is refused here, at the handshake, with the fatal ERR_MUX_VERSION,
 * instead of failing later at setup decoding with a retryable ERR_MUX_PROTOCOL that a
 * reconnect loop would retry forever. (Accepting v4 with reads off would keep two setup
 * layouts alive for a peer no deployment runs: both sides ship together.)
 */
export const PROTOCOL_VERSION = 5;
/** Every handshake message has this fixed size, so it is validated before it is parsed. */
export const HANDSHAKE_MESSAGE_BYTES = 88;
/**
 * What the connection carries after the handshake, in the last word of every handshake
 * message: frames on this socket in clear (TcpTransport with frameProtection 'none': 0, as
 * when the word was reserved), RDMA setup then QPs (RdmaTransport), or frames on this socket
 * in records sealed with the session keys (TcpTransport's default). A listener refuses
 * another kind at its first message.
 */
export const HANDSHAKE_TRANSPORTS = { tcp: 0, rdma: 1, 'tcp-sealed': 2 } as const;
export type HandshakeTransport = keyof typeof HANDSHAKE_TRANSPORTS;
const TRANSPORT_NAMES: readonly HandshakeTransport[] = ['tcp', 'rdma', 'tcp-sealed'];
const MAGIC_BYTES = [0x52, 0x44, 0x4d, 0x58] as const;
/**
 * Shortest shared secret accepted. One captured HELLO/CHALLENGE lets an eavesdropper test
 * guesses offline, so the secret must be a random key (32 bytes: 256 bits), not a word.
 */
export const MIN_SECRET_BYTES = 32;

/** Message types. */
const HELLO = 1;
const CHALLENGE = 2;
const PROOF = 3;
const ACCEPT = 4;
const REJECT = 5;
/** REJECT reasons. */
const R_VERSION = 1;
const R_AUTH = 2;
const R_MALFORMED = 3;
const R_TRANSPORT = 4;

const NONCE = 32;
/** Where the proof sits in a message; zeroed in the transcript hash. */
const PROOF_OFFSET = 40;
const LABEL_SERVER = Buffer.from('rdmajs-mux/server-proof');
const LABEL_CLIENT = Buffer.from('rdmajs-mux/client-proof');
const INFO_CLIENT_TO_SERVER = Buffer.from('rdmajs-mux/c2s');
const INFO_SERVER_TO_CLIENT = Buffer.from('rdmajs-mux/s2c');
/** Length of each session key (AES-256). */
export const SESSION_KEY_BYTES = 32;

/**
 * Keys for protecting what follows the handshake, one per direction, derived from the secret
 * and the transcript: fresh for every connection, and known only to the two sides.
 */
export interface SessionKeys {
  /** Key for what this side sends. */
  send: Buffer;
  /** Key for what this side receives (the peer's `send`). */
  receive: Buffer;
}

/** What each side tells the other it accepts (its receive limits). */
export interface HandshakeLimits {
  /** Largest message payload it accepts, bytes. */
  maxFrameBytes: number;
  /** Bytes (payloads + frame headers) the peer may have sent and it not released. */
  windowBytes: number;
  /** Messages the peer may have sent and it not released. */
  windowMessages: number;
}

export type HandshakeState =
  | 'initial'
  | 'hello-sent'
  | 'challenge-sent'
  | 'proof-sent'
  | 'done'
  | 'failed';

export interface HandshakeOptions {
  role: 'client' | 'server';
  secret: SharedSecret;
  limits: HandshakeLimits;
  /** Protocol version to speak. Default PROTOCOL_VERSION; others only to test rejection. */
  version?: number;
  /** What follows the handshake on this connection. Default 'tcp'. */
  transport?: HandshakeTransport;
}

/**
 * The versioned, mutually authenticated handshake, without I/O (the transport moves the
 * bytes), so every transport shares it:
 *
 * ```
 * client                                   server
 * HELLO     nonceC, limitsC        ──►
 *                                  ◄──     CHALLENGE nonceS, limitsS, HMAC(k, S|th)
 * PROOF     HMAC(k, C|th)          ──►
 *                                  ◄──     ACCEPT              (or REJECT reason)
 *
 * th = SHA-256(HELLO | CHALLENGE with its proof field zeroed)
 * sessionKeys: HKDF-SHA256(k, salt th, info 'rdmajs-mux/c2s' | 'rdmajs-mux/s2c')
 * ```
 * The secret never goes on the wire; proofs are bound to the whole transcript (both fresh
 * nonces, both sides' limits, version and transport) and to the role, so neither a replay,
 * a reflection nor a relay that rewrites a field passes. The server proves first but learns nothing
 * it can use; the client sends nothing but its proof before it has verified the server,
 * and nothing at all (no frames, no memory keys) before ACCEPT. A side that rejects puts
 * the reason in `rejection` to send before closing, then throws a typed error:
 * ERR_MUX_VERSION, ERR_MUX_AUTH, ERR_MUX_TRANSPORT (the peer is another transport's
 * listener or client: refused at its first message, before any proof) or ERR_MUX_HANDSHAKE.
 */
export class Handshake {
  readonly role: 'client' | 'server';
  readonly version: number;
  readonly limits: HandshakeLimits;
  readonly transport: HandshakeTransport;
  #key: Buffer;
  #state: HandshakeState = 'initial';
  #nonce: Buffer = randomBytes(NONCE);
  #peerLimits: HandshakeLimits | undefined;
  #rejection: Uint8Array | undefined;
  /** The client's HELLO as sent / the server's as received: the transcript's first half. */
  #hello: Uint8Array | undefined;
  #transcript: Buffer | undefined;
  #sessionKeys: SessionKeys | undefined;

  constructor(options: HandshakeOptions) {
    if (options.role !== 'client' && options.role !== 'server') {
      throw new MuxError('ERR_MUX_INVALID_ARG', `role must be 'client' or 'server'`);
    }
    this.role = options.role;
    this.#key = secretKey(options.secret);
    this.version = options.version ?? PROTOCOL_VERSION;
    if (!Number.isInteger(this.version) || this.version < 0 || this.version > 0xffff) {
      throw new MuxError('ERR_MUX_INVALID_ARG', `version must be a u16, got ${this.version}`);
    }
    this.limits = checkLimits(options.limits, 'limits', MuxError);
    const t = options.transport ?? 'tcp';
    if (!TRANSPORT_NAMES.includes(t)) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        `transport must be one of ${TRANSPORT_NAMES.map((n) => `'${n}'`).join(', ')}`,
      );
    }
    this.transport = t;
  }

  get state(): HandshakeState {
    return this.#state;
  }

  /** The peer's limits, once done. */
  get peerLimits(): HandshakeLimits | undefined {
    return this.#state === 'done' ? this.#peerLimits : undefined;
  }

  /**
   * Once done: this connection's keys, one per direction, for the transport to protect what
   * follows the handshake. Derived when first asked for.
   */
  get sessionKeys(): SessionKeys | undefined {
    if (this.#state !== 'done') return undefined;
    if (this.#sessionKeys === undefined) {
      const th = this.#transcript as Buffer;
      const c2s = this.#deriveKey(th, INFO_CLIENT_TO_SERVER);
      const s2c = this.#deriveKey(th, INFO_SERVER_TO_CLIENT);
      this.#sessionKeys =
        this.role === 'client' ? { send: c2s, receive: s2c } : { send: s2c, receive: c2s };
    }
    return this.#sessionKeys;
  }

  /** After a failure: the REJECT message to send the peer before closing, if any. */
  get rejection(): Uint8Array | undefined {
    return this.#rejection;
  }

  /** The client's first message. */
  start(): Uint8Array {
    if (this.role !== 'client' || this.#state !== 'initial') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'start() is for a new client handshake');
    }
    this.#state = 'hello-sent';
    this.#hello = this.#message(HELLO, 0, this.#nonce, undefined, this.limits);
    return this.#hello;
  }

  /**
   * Checks the first `length` bytes of a message still arriving: a peer whose first bytes
   * are not the magic is no rdmajs peer, and fails at once (ERR_MUX_HANDSHAKE) rather than
   * after a whole message, which such a peer may never send.
   */
  checkPrefix(bytes: Uint8Array, length: number): void {
    const n = Math.min(length, MAGIC_BYTES.length, bytes.length);
    for (let i = 0; i < n; i++) {
      if (bytes[i] !== MAGIC_BYTES[i]) {
        this.#fail('ERR_MUX_HANDSHAKE', 'bad magic: not an rdmajs peer', R_MALFORMED);
      }
    }
  }

  /**
   * Takes one message from the peer (exactly HANDSHAKE_MESSAGE_BYTES); returns the reply to
   * send, if any. `state` is 'done' once the handshake succeeded.
   */
  receive(msg: Uint8Array): Uint8Array | undefined {
    const s = this.#state;
    if (s === 'done' || s === 'failed' || (s === 'initial' && this.role === 'client')) {
      return this.#fail('ERR_MUX_HANDSHAKE', `unexpected message in state ${s}`);
    }
    if (msg.length !== HANDSHAKE_MESSAGE_BYTES) {
      return this.#fail('ERR_MUX_HANDSHAKE', `message of ${msg.length} bytes`, R_MALFORMED);
    }
    const v = new DataView(msg.buffer, msg.byteOffset, msg.length);
    if (v.getUint32(0) !== HANDSHAKE_MAGIC) {
      return this.#fail('ERR_MUX_HANDSHAKE', 'bad magic: not an rdmajs peer', R_MALFORMED);
    }
    const version = v.getUint16(4);
    const type = v.getUint8(6);
    const status = v.getUint8(7);
    const transport = v.getUint32(84);
    if (type === REJECT) return this.#rejected(status, version, transport);
    if (transport !== HANDSHAKE_TRANSPORTS[this.transport]) {
      // Before the version: a listener of the other transport says so, whatever it speaks.
      return this.#fail(
        'ERR_MUX_TRANSPORT',
        `the peer speaks rdmajs over ${transportName(transport)}, this side over ${this.transport}`,
        R_TRANSPORT,
      );
    }
    if (version !== this.version) {
      return this.#fail(
        'ERR_MUX_VERSION',
        `peer speaks protocol version ${version}, this side ${this.version}`,
        R_VERSION,
        version,
      );
    }
    if (status !== 0) {
      return this.#fail('ERR_MUX_HANDSHAKE', 'reserved fields set', R_MALFORMED);
    }
    const proof = msg.subarray(PROOF_OFFSET, PROOF_OFFSET + NONCE);
    if (this.role === 'server' && this.#state === 'initial') {
      if (type !== HELLO)
        return this.#fail('ERR_MUX_HANDSHAKE', `expected HELLO, got ${type}`, R_MALFORMED);
      this.#peerLimits = this.#readLimits(v);
      this.#state = 'challenge-sent';
      const challenge = this.#message(CHALLENGE, 0, this.#nonce, undefined, this.limits);
      this.#transcript = transcriptHash(msg, challenge);
      challenge.set(this.#hmac(LABEL_SERVER, this.#transcript), PROOF_OFFSET);
      return challenge;
    }
    if (this.role === 'client' && this.#state === 'hello-sent') {
      if (type !== CHALLENGE) {
        return this.#fail('ERR_MUX_HANDSHAKE', `expected CHALLENGE, got ${type}`, R_MALFORMED);
      }
      this.#transcript = transcriptHash(this.#hello as Uint8Array, msg);
      const expected = this.#hmac(LABEL_SERVER, this.#transcript);
      if (!timingSafeEqual(expected, proof)) {
        return this.#fail(
          'ERR_MUX_AUTH',
          'the server does not hold the shared secret, or the messages were altered on the way',
          R_AUTH,
        );
      }
      this.#peerLimits = this.#readLimits(v);
      this.#state = 'proof-sent';
      const myProof = this.#hmac(LABEL_CLIENT, this.#transcript);
      return this.#message(PROOF, 0, undefined, myProof, undefined);
    }
    if (this.role === 'server' && this.#state === 'challenge-sent') {
      if (type !== PROOF)
        return this.#fail('ERR_MUX_HANDSHAKE', `expected PROOF, got ${type}`, R_MALFORMED);
      const expected = this.#hmac(LABEL_CLIENT, this.#transcript as Buffer);
      if (!timingSafeEqual(expected, proof)) {
        return this.#fail('ERR_MUX_AUTH', 'the client does not hold the shared secret', R_AUTH);
      }
      this.#state = 'done';
      return this.#message(ACCEPT, 0, undefined, undefined, undefined);
    }
    if (this.role === 'client' && this.#state === 'proof-sent') {
      if (type !== ACCEPT)
        return this.#fail('ERR_MUX_HANDSHAKE', `expected ACCEPT, got ${type}`, R_MALFORMED);
      this.#state = 'done';
      return undefined;
    }
    return this.#fail('ERR_MUX_HANDSHAKE', `unexpected message ${type} in state ${this.#state}`);
  }

  /** Marks the handshake failed with `err` (e.g. a timeout) and throws it. */
  #fail(
    code: 'ERR_MUX_HANDSHAKE' | 'ERR_MUX_VERSION' | 'ERR_MUX_AUTH' | 'ERR_MUX_TRANSPORT',
    message: string,
    reason?: number,
    peerVersion?: number,
  ): never {
    this.#state = 'failed';
    if (reason !== undefined)
      this.#rejection = this.#message(REJECT, reason, undefined, undefined, undefined);
    throw new MuxHandshakeError(code, `handshake (${this.role}): ${message}`, peerVersion);
  }

  #rejected(status: number, version: number, transport: number): never {
    this.#state = 'failed';
    if (status === R_TRANSPORT) {
      throw new MuxHandshakeError(
        'ERR_MUX_TRANSPORT',
        `handshake (${this.role}): the peer speaks rdmajs over ${transportName(transport)}, not ${this.transport}`,
      );
    }
    if (status === R_VERSION) {
      throw new MuxHandshakeError(
        'ERR_MUX_VERSION',
        `handshake (${this.role}): peer rejected protocol version ${this.version}; it speaks ${version}`,
        version,
      );
    }
    if (status === R_AUTH) {
      throw new MuxHandshakeError(
        'ERR_MUX_AUTH',
        `handshake (${this.role}): peer rejected our proof (wrong secret)`,
      );
    }
    throw new MuxHandshakeError(
      'ERR_MUX_HANDSHAKE',
      `handshake (${this.role}): peer rejected it (reason ${status})`,
    );
  }

  #hmac(label: Buffer, transcript: Buffer): Buffer {
    return createHmac('sha256', this.#key).update(label).update(transcript).digest();
  }

  #deriveKey(transcript: Buffer, info: Buffer): Buffer {
    return Buffer.from(hkdfSync('sha256', this.#key, transcript, info, SESSION_KEY_BYTES));
  }

  #readLimits(v: DataView): HandshakeLimits {
    const limits = {
      maxFrameBytes: v.getUint32(72),
      windowBytes: v.getUint32(76),
      windowMessages: v.getUint32(80),
    };
    try {
      return checkLimits(limits, 'peer limits', MuxError);
    } catch (err) {
      return this.#fail('ERR_MUX_HANDSHAKE', (err as Error).message, R_MALFORMED);
    }
  }

  #message(
    type: number,
    status: number,
    nonce: Buffer | undefined,
    proof: Buffer | undefined,
    limits: HandshakeLimits | undefined,
  ): Uint8Array {
    const out = new Uint8Array(HANDSHAKE_MESSAGE_BYTES);
    const v = new DataView(out.buffer);
    v.setUint32(0, HANDSHAKE_MAGIC);
    v.setUint16(4, this.version);
    v.setUint8(6, type);
    v.setUint8(7, status);
    if (nonce !== undefined) out.set(nonce, 8);
    if (proof !== undefined) out.set(proof, 40);
    if (limits !== undefined) {
      v.setUint32(72, limits.maxFrameBytes);
      v.setUint32(76, limits.windowBytes);
      v.setUint32(80, limits.windowMessages);
    }
    v.setUint32(84, HANDSHAKE_TRANSPORTS[this.transport]);
    return out;
  }
}

/** SHA-256 of HELLO then CHALLENGE, the CHALLENGE's proof field read as zeros. */
function transcriptHash(hello: Uint8Array, challenge: Uint8Array): Buffer {
  const unproved = Uint8Array.prototype.slice.call(challenge) as Uint8Array;
  unproved.fill(0, PROOF_OFFSET, PROOF_OFFSET + NONCE);
  return createHash('sha256').update(hello).update(unproved).digest();
}

function transportName(id: number): string {
  return TRANSPORT_NAMES[id] ?? `an unknown transport (${id})`;
}

/** Smallest window and largest frame a side may announce. */
export const MIN_WINDOW_BYTES = 64 * 1024;
export const MAX_FRAME_LIMIT = 1024 * 1024 * 1024;

function checkLimits(l: HandshakeLimits, what: string, E: typeof MuxError): HandshakeLimits {
  const { maxFrameBytes, windowBytes, windowMessages } = l ?? ({} as HandshakeLimits);
  const int = (x: unknown): x is number =>
    Number.isInteger(x) && (x as number) >= 1 && (x as number) <= 0xffffffff;
  if (!int(maxFrameBytes) || maxFrameBytes > MAX_FRAME_LIMIT) {
    throw new E(
      'ERR_MUX_INVALID_ARG',
      `${what}: maxFrameBytes must be 1 … ${MAX_FRAME_LIMIT}, got ${maxFrameBytes}`,
    );
  }
  if (!int(windowBytes) || windowBytes < MIN_WINDOW_BYTES) {
    throw new E(
      'ERR_MUX_INVALID_ARG',
      `${what}: windowBytes must be ≥ ${MIN_WINDOW_BYTES}, got ${windowBytes}`,
    );
  }
  if (!int(windowMessages)) {
    throw new E(
      'ERR_MUX_INVALID_ARG',
      `${what}: windowMessages must be ≥ 1, got ${windowMessages}`,
    );
  }
  return { maxFrameBytes, windowBytes, windowMessages };
}

/** The HMAC key: the secret's bytes. Throws ERR_MUX_INVALID_ARG if shorter than MIN_SECRET_BYTES. */
function secretKey(secret: SharedSecret): Buffer {
  let key: Buffer;
  if (typeof secret === 'string') key = Buffer.from(secret, 'utf8');
  else if (secret instanceof Uint8Array) key = Buffer.from(secret);
  else throw new MuxError('ERR_MUX_INVALID_ARG', 'secret must be a string or a Uint8Array');
  if (key.length < MIN_SECRET_BYTES) {
    throw new MuxError(
      'ERR_MUX_INVALID_ARG',
      `secret must be at least ${MIN_SECRET_BYTES} bytes (a random key, e.g. randomBytes(${MIN_SECRET_BYTES})), got ${key.length}`,
    );
  }
  return key;
}
