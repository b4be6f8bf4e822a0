import { createCipheriv } from 'node:crypto';
import type { Socket } from 'node:net';
import { AEAD_NONCE_BYTES, writeAeadNonce } from '@rdmajs/mux';
import type { FrameOutput } from './FrameOutput.js';
import { MAX_RECORD_BYTES, RECORD_HEADER_BYTES } from './SealedRecords.js';

type WriteCallback = (err?: Error | null) => void;

/**
 * Seals a connection's frames with its send key: everything written between cork and
 * uncork (one tick of TcpConnection's writes) becomes records of up to MAX_RECORD_BYTES,
 * each encrypted and authenticated (AES-256-GCM, the record's length as associated data, a
 * per-direction counter as nonce), so a peer on the path can neither read, alter, replay,
 * reorder, drop nor inject frames undetected. The ciphertext is the one copy sealing needs;
 * message parts are not copied before it.
 */
export class SealedWriter implements FrameOutput {
  readonly #socket: Socket;
  readonly #key: Uint8Array;
  readonly #nonce = Buffer.alloc(AEAD_NONCE_BYTES);
  #count = 0;
  #corked = 0;
  #parts: Uint8Array[] = [];
  #queued = 0;
  #callbacks: WriteCallback[] = [];

  constructor(socket: Socket, sendKey: Uint8Array) {
    this.#socket = socket;
    this.#key = sendKey;
  }

  get writableLength(): number {
    return this.#socket.writableLength + this.#queued;
  }

  cork(): void {
    this.#corked++;
  }

  uncork(): void {
    if (this.#corked > 0) this.#corked--;
    if (this.#corked === 0) this.#flush();
  }

  write(chunk: Uint8Array, cb?: WriteCallback): void {
    if (chunk.length > 0) {
      this.#parts.push(chunk);
      this.#queued += chunk.length;
    }
    if (cb !== undefined) this.#callbacks.push(cb);
    if (this.#corked === 0) this.#flush();
  }

  end(): void {
    this.#corked = 0;
    this.#flush();
    this.#socket.end();
  }

  #flush(): void {
    const parts = this.#parts;
    const callbacks = this.#callbacks;
    if (parts.length === 0 && callbacks.length === 0) return;
    this.#parts = [];
    this.#callbacks = [];
    let left = this.#queued;
    this.#queued = 0;
    const s = this.#socket;
    const done =
      callbacks.length === 0
        ? undefined
        : (err?: Error | null) => {
            for (const f of callbacks) f(err);
          };
    if (left === 0) {
      // Only callbacks (nothing to seal): they run once what was written before is taken.
      s.write(Buffer.alloc(0), done);
      return;
    }
    s.cork();
    let part = 0;
    let at = 0;
    while (left > 0) {
      const length = Math.min(MAX_RECORD_BYTES, left);
      left -= length;
      const header = Buffer.allocUnsafe(RECORD_HEADER_BYTES);
      header.writeUInt32BE(length, 0);
      const cipher = createCipheriv(
        'aes-256-gcm',
        this.#key,
        writeAeadNonce(this.#nonce, this.#count++),
      );
      cipher.setAAD(header);
      s.write(header);
      for (let need = length; need > 0; ) {
        const p = parts[part] as Uint8Array;
        const take = Math.min(need, p.length - at);
        s.write(cipher.update(take === p.length ? p : p.subarray(at, at + take)));
        need -= take;
        at += take;
        if (at === p.length) {
          part++;
          at = 0;
        }
      }
      const tail = cipher.final(); // empty for GCM; written if a cipher ever returns bytes
      if (tail.length > 0) s.write(tail);
      s.write(cipher.getAuthTag(), left === 0 ? done : undefined);
    }
    s.uncork();
  }
}
