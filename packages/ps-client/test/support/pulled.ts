import { expect } from 'vitest';
import type { PulledRows } from '../../src/index.js';

/**
 * The rows of a pull as a private array, after checking that every `row(i)` view (in the
 * replies' memory) holds the same floats as the gathered `rows`; releases the replies.
 */
export async function pulledRows(p: Promise<PulledRows>): Promise<Float32Array> {
  const r = await p;
  try {
    const rows = r.rows;
    expect(rows.length).toBe(r.count * r.dim);
    const bytes = (f: Float32Array) => Buffer.from(f.buffer, f.byteOffset, f.byteLength);
    let bad = -1;
    for (let i = 0; i < r.count && bad < 0; i++) {
      const want = rows.subarray(i * r.dim, (i + 1) * r.dim);
      if (!bytes(r.row(i)).equals(bytes(want))) bad = i;
    }
    expect(bad, 'first row whose view differs from rows').toBe(-1);
    return rows.slice();
  } finally {
    r.release();
  }
}
