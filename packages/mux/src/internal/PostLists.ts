/** Most work requests one post takes from a PostLists (longer batches go as several posts). */
export const POST_LIST_MAX = 64;

/**
 * Arrays of every length 2 … POST_LIST_MAX, made when first needed and kept, to hand a batch
 * of work requests to verbs (whose posts take an array and post all of it). A batch filled
 * into one growing array would need its length set per post, and setting a shorter length
 * trims the array's store: the next longer batch allocates a new one.
 */
export class PostLists<T> {
  readonly #lists: (T[] | undefined)[] = new Array<T[] | undefined>(POST_LIST_MAX + 1).fill(
    undefined,
  );

  /** The `k` (2 … POST_LIST_MAX) items `src[from … from + k)` as an array of length k. */
  list(src: readonly (T | undefined)[], from: number, k: number): T[] {
    let list = this.#lists[k];
    if (list === undefined) {
      list = new Array<T>(k);
      this.#lists[k] = list;
    }
    for (let j = 0; j < k; j++) list[j] = src[from + j] as T;
    return list;
  }
}
