// The index hash is part of the one-sided read layout (a client finds a key's bucket with
// it), so its one definition lives in @rdmajs/ps-wire.
export { hash64 } from '@rdmajs/ps-wire';
