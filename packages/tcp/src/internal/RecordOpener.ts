import { createDecipheriv } from 'node:crypto';
import {
  AEAD_NONCE_BYTES,
  AEAD_TAG_BYTES,
  MuxError,
  MuxProtocolError,
  writeAeadNonce,
} from '@rdmajs/mux';
import { MAX_RECORD_BYTES, RECORD_HEADER_BYTES } from './SealedRecords.js';

/**
 * Opens the peer's sealed records (see SealedWriter) in order and hands each plaintext on
 * only after its tag checked: nothing unauthenticated reaches the frame parser. A length
 * outside 1 … MAX_RECORD_BYTES is refused before anything is buffered for it; a record
 * that lies inside one socket chunk is opened from the chunk, others are gathered in one
 * buffer of the largest record's size, made once per connection.
 */
export class RecordOpener {
  readonly #key: Uint8Array;
  readonly #sink: (plaintext: Uint8Array) => void;
  readonly #nonce = Buffer.alloc(AEAD_NONCE_BYTES);
  readonly #header = Buffer.alloc(RECORD_HEADER_BYTES);
  #count = 0;
  #headerFill = 0;
  #length = 0;
  #body: Buffer | undefined;
  #bodyFill = 0;

  constructor(receiveKey: Uint8Array, sink: (plaintext: Uint8Array) => void) {
    this.#key = receiveKey;
    this.#sink = sink;
  }

  /** Bytes of a partial record held. */
  get partialBytes(): number {
    return this.#headerFill + this.#bodyFill;
  }

  /** Feeds one socket chunk; throws ERR_MUX_INTEGRITY or ERR_MUX_PROTOCOL on bad input. */
  push(chunk: Uint8Array): void {
    let off = 0;
    const n = chunk.length;
    while (off < n) {
      if (this.#headerFill < RECORD_HEADER_BYTES) {
        const take = Math.min(RECORD_HEADER_BYTES - this.#headerFill, n - off);
        this.#header.set(chunk.subarray(off, off + take), this.#headerFill);
        this.#headerFill += take;
        off += take;
        if (this.#headerFill < RECORD_HEADER_BYTES) return;
        const length = this.#header.readUInt32BE(0);
        if (length === 0 || length > MAX_RECORD_BYTES) {
          throw new MuxProtocolError(
            `sealed record of ${length} bytes (1 … ${MAX_RECORD_BYTES} allowed)`,
          );
        }
        this.#length = length;
        this.#bodyFill = 0;
      }
      const need = this.#length + AEAD_TAG_BYTES;
      if (this.#bodyFill === 0 && n - off >= need) {
        const body = chunk.subarray(off, off + need);
        off += need;
        this.#open(body);
        continue;
      }
      this.#body ??= Buffer.allocUnsafeSlow(MAX_RECORD_BYTES + AEAD_TAG_BYTES);
      const take = Math.min(need - this.#bodyFill, n - off);
      this.#body.set(chunk.subarray(off, off + take), this.#bodyFill);
      this.#bodyFill += take;
      off += take;
      if (this.#bodyFill === need) this.#open(this.#body.subarray(0, need));
    }
  }

  /** `body`: ciphertext then tag. The plaintext is a fresh buffer (frames may keep views of it). */
  #open(body: Uint8Array): void {
    const length = this.#length;
    this.#headerFill = 0;
    this.#bodyFill = 0;
    let plaintext: Buffer;
    try {
      const d = createDecipheriv(
        'aes-256-gcm',
        this.#key,
        writeAeadNonce(this.#nonce, this.#count++),
      );
      d.setAAD(this.#header);
      d.setAuthTag(body.subarray(length));
      plaintext = d.update(body.subarray(0, length));
      const tail = d.final();
      if (tail.length > 0) plaintext = Buffer.concat([plaintext, tail]);
    } catch (cause) {
      throw new MuxError(
        'ERR_MUX_INTEGRITY',
        'a sealed record failed authentication (altered, replayed, reordered or not from the peer)',
        { cause },
      );
    }
    this.#sink(plaintext);
  }
}
