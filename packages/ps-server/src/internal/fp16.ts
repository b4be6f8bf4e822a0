// fp16 rows are read by the one-sided reader too, so the conversions live in @rdmajs/ps-wire.
export { HALF_TO_FLOAT, toHalf } from '@rdmajs/ps-wire';
