import { createCipheriv, createDecipheriv } from 'node:crypto';
import { AEAD_NONCE_BYTES, AEAD_TAG_BYTES, writeAeadNonce } from '../AeadNonce.js';
import { MuxError } from '../errors.js';
import { SESSION_KEY_BYTES } from '../Handshake.js';

/** AES-256-GCM's tag, after every control message. */
export const CONTROL_TAG_BYTES = AEAD_TAG_BYTES;
/** `u32 payload length | u8 type`, in clear and authenticated (the AEAD's associated data). */
export const CONTROL_HEADER_BYTES = 5;

function checkKey(key: Uint8Array): void {
  if (!(key instanceof Uint8Array) || key.length !== SESSION_KEY_BYTES) {
    throw new MuxError('ERR_MUX_INVALID_ARG', `a control key is ${SESSION_KEY_BYTES} bytes`);
  }
}

/** Seals what one side sends on the control connection, in order. */
export class ControlSealer {
  readonly #key: Uint8Array;
  #count = 0;
  /** Rewritten per message (see writeAeadNonce); the cipher copies it. */
  readonly #nonce = Buffer.alloc(AEAD_NONCE_BYTES);

  constructor(key: Uint8Array) {
    checkKey(key);
    this.#key = key;
  }

  /** The whole message: header, encrypted payload, tag. */
  seal(type: number, payload: Uint8Array | undefined): Buffer {
    const length = payload?.length ?? 0;
    const out = Buffer.allocUnsafe(CONTROL_HEADER_BYTES + length + CONTROL_TAG_BYTES);
    out.writeUInt32BE(length, 0);
    out.writeUInt8(type, 4);
    const header = out.subarray(0, CONTROL_HEADER_BYTES);
    const cipher = createCipheriv(
      'aes-256-gcm',
      this.#key,
      writeAeadNonce(this.#nonce, this.#count++),
    );
    cipher.setAAD(header);
    let at = CONTROL_HEADER_BYTES;
    if (length > 0) at += cipher.update(payload as Uint8Array).copy(out, at);
    at += cipher.final().copy(out, at);
    cipher.getAuthTag().copy(out, at);
    return out;
  }
}

/** Opens what the peer sent, in order; anything altered, replayed or forged fails. */
export class ControlOpener {
  readonly #key: Uint8Array;
  #count = 0;
  /** Rewritten per message (see writeAeadNonce); the cipher copies it. */
  readonly #nonce = Buffer.alloc(AEAD_NONCE_BYTES);

  constructor(key: Uint8Array) {
    checkKey(key);
    this.#key = key;
  }

  /** The payload of one message; throws ERR_MUX_INTEGRITY if it does not authenticate. */
  open(header: Uint8Array, sealed: Uint8Array, tag: Uint8Array): Uint8Array {
    const decipher = createDecipheriv(
      'aes-256-gcm',
      this.#key,
      writeAeadNonce(this.#nonce, this.#count++),
    );
    decipher.setAAD(header);
    decipher.setAuthTag(tag);
    try {
      const head = decipher.update(sealed);
      const tail = decipher.final();
      return tail.length === 0 ? head : Buffer.concat([head, tail]);
    } catch {
      throw new MuxError(
        'ERR_MUX_INTEGRITY',
        'control: a message failed authentication (altered, replayed or not from the peer)',
      );
    }
  }
}
