/** AES-256-GCM nonce length (the IV GCM is made for). */
export const AEAD_NONCE_BYTES = 12;
/** AES-256-GCM tag length, after every sealed message or record. */
export const AEAD_TAG_BYTES = 16;

/**
 * Writes the nonce of the `count`-th message sealed in one direction into `out` (12 bytes):
 * 4 zero bytes, then `count` as a big-endian u64. Each direction has its own session key,
 * so a (key, nonce) pair is never reused, and a message replayed, dropped or reordered fails
 * to open. Counts stay below 2^53 (a connection would need centuries to get there).
 */
export function writeAeadNonce(out: Uint8Array, count: number): Uint8Array {
  const v = new DataView(out.buffer, out.byteOffset, AEAD_NONCE_BYTES);
  v.setUint32(0, 0);
  v.setUint32(4, Math.floor(count / 0x1_0000_0000));
  v.setUint32(8, count >>> 0);
  return out;
}
