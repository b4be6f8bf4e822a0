/** Most work requests one post takes from a PostLists (longer batches go as several posts). */
export const POST_LIST_MAX = 64;

/**
 * Arrays of every length 2 … POST_LIST_MAX, made up front and kept, to hand a batch of work
 * requests to verbs (whose posts take an array and post all of it). A batch filled into one
 * growing array would need its length set per post, and setting a shorter length trims the
 * array's store: the next longer batch allocates a new one. Not made when first needed: a
 * busy moment brings batch lengths never seen before, and steady state would allocate then
 * (≈ 17 KB per instance, one per connection and one per receive pool).
 */
export class PostLists<T> {
  readonly #lists: T[][] = Array.from({ length: POST_LIST_MAX + 1 }, (_, k) => new Array<T>(k));

  /** The `k` (2 … POST_LIST_MAX) items `src[from … from + k)` as an array of length k. */
  list(src: readonly (T | undefined)[], from: number, k: number): T[] {
    const list = this.#lists[k] as T[];
    for (let j = 0; j < k; j++) list[j] = src[from + j] as T;
    return list;
  }
}
