import { execFileSync, spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ParameterStore, SNAPSHOT_VERSION } from '../src/index.js';
import { tmpDir } from './helpers.js';

const probe = spawnSync('python3', ['-c', 'import safetensors.numpy, numpy'], { encoding: 'utf8' });
const hasPython = probe.status === 0;
if (!hasPython)
  console.warn(
    `python-interop skipped: python3 cannot import safetensors and numpy (pip install safetensors numpy): ${probe.error?.message ?? probe.stderr}`,
  );

const SCRIPT = `
import json, sys
from safetensors.numpy import load_file
from safetensors import safe_open
t = load_file(sys.argv[1])
with safe_open(sys.argv[1], framework="np") as f:
    md = f.metadata()
out = {"metadata": md, "tensors": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.astype("float64").ravel().tolist() if v.dtype.kind == "f" else [str(x) for x in v.ravel().tolist()]} for k, v in t.items()}}
print(json.dumps(out))
`;

describe.skipIf(!hasPython)('snapshots open in Python', () => {
  it('safetensors_numpy_load_file_reads_a_snapshot_and_the_arrays_match', async () => {
    const dir = tmpDir();
    const s = await ParameterStore.open({
      dir,
      log: false,
      tables: [
        { name: 'emb', dim: 4, optimizer: { kind: 'adagrad' }, init: { kind: 'normal', seed: 1 } },
        {
          name: 'half',
          dim: 3,
          optimizer: { kind: 'adam' },
          rowDtype: 'f16',
          budgetBytes: 1 << 16,
          admission: { threshold: 1, width: 16, depth: 1 },
        },
      ],
      dense: [{ name: 'w', shape: [2, 3], optimizer: { kind: 'sgd', lr: 0.1 } }],
    });
    const keys = BigUint64Array.of(1n, 2n ** 64n - 1n, 12345678901234567890n);
    await s.push(
      'emb',
      keys,
      Float32Array.from({ length: 12 }, (_, i) => i / 7),
      { session: 'a', seq: 1 },
    );
    await s.push(
      'half',
      keys,
      Float32Array.from({ length: 9 }, (_, i) => i - 4),
      { session: 'a', seq: 2 },
    );
    await s.pushDense('w', Float32Array.of(1, 2, 3, 4, 5, 6), { session: 'a', seq: 3 });
    const info = await s.snapshot();
    const py = JSON.parse(
      execFileSync('python3', ['-c', SCRIPT, info.file], { encoding: 'utf8' }),
    ) as {
      metadata: Record<string, string>;
      tensors: Record<string, { dtype: string; shape: number[]; values: Array<number | string> }>;
    };
    expect(py.metadata.version).toBe(SNAPSHOT_VERSION);
    expect(py.metadata.format).toBe('rdmajs-ps-snapshot');
    const emb = py.tensors['sparse/emb/keys'];
    expect(emb?.dtype).toBe('uint64');
    expect(py.tensors['sparse/emb/rows']?.shape).toEqual([3, 4]);
    expect(py.tensors['sparse/emb/sum']?.dtype).toBe('float32');
    expect(py.tensors['sparse/half/rows']?.dtype).toBe('float16');
    expect(py.tensors['sparse/half/exp_avg_sq']?.shape).toEqual([3, 3]);
    expect(py.tensors['dense/w']?.shape).toEqual([2, 3]);
    for (const [table, dim] of [
      ['emb', 4],
      ['half', 3],
    ] as const) {
      const pk = BigUint64Array.from(
        (py.tensors[`sparse/${table}/keys`]?.values ?? []).map((v) => BigInt(v as string)),
      );
      expect([...pk].sort()).toEqual([...keys].sort());
      const want = new Float32Array(pk.length * dim);
      s.pullInto(table, pk, want);
      expect(py.tensors[`sparse/${table}/rows`]?.values).toEqual(Array.from(want));
    }
    const w = new Float32Array(6);
    s.pullDense('w', w);
    expect(py.tensors['dense/w']?.values).toEqual(Array.from(w));
    await s.close();
  });
});
