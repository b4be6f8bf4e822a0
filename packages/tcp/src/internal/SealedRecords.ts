/** A sealed record: `u32 plaintext length | ciphertext | AES-256-GCM tag`; the length is the AAD. */
export const RECORD_HEADER_BYTES = 4;
/**
 * Largest plaintext of one record. Bounds what a receiver buffers before it can authenticate
 * (it acts on nothing before the tag checks), and what one cipher call holds the loop for.
 */
export const MAX_RECORD_BYTES = 256 * 1024;
