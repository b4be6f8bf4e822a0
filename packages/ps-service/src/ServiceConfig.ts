import type { DenseTensorConfig, PushLogOptions, SparseTableConfig } from '@rdmajs/ps-server';
import { z } from 'zod';
import { PsServiceError } from './errors.js';

const num = z.number().finite();
const name = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,200}$/, 'names are 1–200 characters of [A-Za-z0-9_.-]');

const optimizer = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('sgd'),
    lr: num,
    momentum: num.optional(),
    dampening: num.optional(),
    weightDecay: num.optional(),
    nesterov: z.boolean().optional(),
  }),
  z.strictObject({
    kind: z.literal('adagrad'),
    lr: num.optional(),
    lrDecay: num.optional(),
    weightDecay: num.optional(),
    initialAccumulatorValue: num.optional(),
    eps: num.optional(),
  }),
  z.strictObject({
    kind: z.enum(['adam', 'adamw']),
    lr: num.optional(),
    beta1: num.optional(),
    beta2: num.optional(),
    eps: num.optional(),
    weightDecay: num.optional(),
  }),
  z.strictObject({
    kind: z.literal('ftrl'),
    alpha: num,
    beta: num.optional(),
    l1: num.optional(),
    l2: num.optional(),
  }),
  z.strictObject({ kind: z.literal('sum') }),
  z.strictObject({ kind: z.literal('assign') }),
]);

const init = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('zeros') }),
  z.strictObject({
    kind: z.literal('uniform'),
    seed: z.number().int(),
    low: num.optional(),
    high: num.optional(),
  }),
  z.strictObject({
    kind: z.literal('normal'),
    seed: z.number().int(),
    mean: num.optional(),
    std: num.optional(),
  }),
]);

/** What the service does with NaN/±Inf gradients: refuse the request (default) or apply them. */
const nonFinite = z.enum(['reject', 'allow']);

/** ps-server's OverflowPolicy: non-finite results of finite gradients. */
const overflow = z.enum(['saturate', 'allow']);

const table = z.strictObject({
  name,
  dim: z.number().int().min(1).max(4096),
  optimizer,
  init: init.optional(),
  rowDtype: z.enum(['f32', 'f16']).optional(),
  /** Bytes (LRU eviction beyond), or 'unbounded' (warned at start). Absent: DEFAULT_TABLE_BYTES of rows. */
  budgetBytes: z.union([z.number().int().positive(), z.literal('unbounded')]).optional(),
  admission: z
    .strictObject({
      threshold: z.number().int().min(1),
      width: z.number().int().positive().optional(),
      depth: z.number().int().positive().optional(),
    })
    .optional(),
  ttlMs: z.number().positive().optional(),
  log: z.boolean().optional(),
  kernels: z.enum(['native', 'js']).optional(),
  overflow: overflow.optional(),
  nonFinite: nonFinite.optional(),
  /**
   * Clients over RDMA READ rows straight from the table's memory (a read region of the RDMA
   * transport; the shard is not woken). Needs a numeric budgetBytes: the region is taken up front.
   */
  oneSidedRead: z.boolean().optional(),
});

const dense = z.strictObject({
  name,
  shape: z.array(z.number().int().min(1)).min(1).max(8),
  optimizer,
  init: init.optional(),
  log: z.boolean().optional(),
  overflow: overflow.optional(),
  nonFinite: nonFinite.optional(),
});

/** The table file: `{ tables, dense?, log? }` (JSON). Unknown keys are refused. */
export const serviceTablesSchema = z.strictObject({
  tables: z.array(table).max(1024),
  dense: z.array(dense).max(1024).optional(),
  log: z
    .strictObject({
      policy: z.enum(['fsync', 'group', 'none']).optional(),
      groupBytes: z.number().int().positive().optional(),
      groupDelayMs: z.number().positive().optional(),
      maxGroupBytes: z.number().int().positive().optional(),
      maxGroupRecords: z.number().int().positive().optional(),
      syncTimeoutMs: z.number().positive().optional(),
      segmentBytes: z.number().int().positive().optional(),
    })
    .optional(),
});

export type NonFinitePolicy = z.infer<typeof nonFinite>;

/**
 * A table without `budgetBytes` holds the rows that fit this many bytes (its `maxRows`, no
 * eviction: new keys beyond are dropped), so pushes of new keys cannot grow it until the
 * process runs out of memory. Rows are counted at their largest (values plus two optimizer
 * states per element, float32, and 64 bytes of slot and index).
 */
export const DEFAULT_TABLE_BYTES = 1 << 30;

function defaultMaxRows(dim: number): number {
  return Math.max(1, Math.floor(DEFAULT_TABLE_BYTES / (3 * 4 * dim + 64)));
}

/** A validated table file, split into what the store takes and the service's own policies. */
export interface ServiceTables {
  tables: SparseTableConfig[];
  dense: DenseTensorConfig[];
  log: PushLogOptions | undefined;
  /** Per table and dense tensor name: the NaN/Inf policy. */
  nonFinite: Map<string, NonFinitePolicy>;
  /** Tables the file left unbounded on purpose (`"budgetBytes": "unbounded"`): warned at start. */
  unbounded?: string[];
}

/** Validates a parsed table file; throws ERR_PS_SERVICE_CONFIG naming the first bad field. */
export function parseServiceTables(input: unknown): ServiceTables {
  const r = serviceTablesSchema.safeParse(input);
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = issue === undefined ? '' : issue.path.join('.');
    throw new PsServiceError(
      'ERR_PS_SERVICE_CONFIG',
      `table file: ${path || '(root)'}: ${issue?.message ?? 'invalid'}`,
    );
  }
  const nonFiniteOf = new Map<string, NonFinitePolicy>();
  const seen = new Set<string>();
  const tables: SparseTableConfig[] = [];
  const denseOut: DenseTensorConfig[] = [];
  const unbounded: string[] = [];
  for (const { nonFinite: nf, budgetBytes, ...t } of r.data.tables) {
    if (seen.has(t.name))
      throw new PsServiceError('ERR_PS_SERVICE_CONFIG', `table file: duplicate name ${t.name}`);
    seen.add(t.name);
    nonFiniteOf.set(t.name, nf ?? 'reject');
    if (budgetBytes === 'unbounded') unbounded.push(t.name);
    if (t.oneSidedRead === true && typeof budgetBytes !== 'number')
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        `table ${t.name}: oneSidedRead needs a budgetBytes number (its memory is taken up front)`,
      );
    const bound =
      budgetBytes === 'unbounded'
        ? {}
        : budgetBytes === undefined
          ? { maxRows: defaultMaxRows(t.dim) }
          : { budgetBytes };
    tables.push(stripUndefined(withOverflow({ ...t, ...bound }, nf)) as SparseTableConfig);
  }
  for (const { nonFinite: nf, ...d } of r.data.dense ?? []) {
    if (seen.has(d.name))
      throw new PsServiceError('ERR_PS_SERVICE_CONFIG', `table file: duplicate name ${d.name}`);
    seen.add(d.name);
    nonFiniteOf.set(d.name, nf ?? 'reject');
    denseOut.push(stripUndefined(withOverflow(d, nf)) as DenseTensorConfig);
  }
  return {
    tables,
    dense: denseOut,
    log: r.data.log === undefined ? undefined : (stripUndefined(r.data.log) as PushLogOptions),
    nonFinite: nonFiniteOf,
    unbounded,
  };
}

/**
 * A table that applies non-finite gradients (`nonFinite: 'allow'`) stores IEEE results unless
 * it asks for saturation; every other table saturates (ps-server's default), so its rows stay
 * finite whatever finite gradients a client sends.
 */
function withOverflow<T extends { overflow?: 'saturate' | 'allow' | undefined }>(
  t: T,
  nf: NonFinitePolicy | undefined,
): T {
  return t.overflow === undefined && nf === 'allow' ? { ...t, overflow: 'allow' } : t;
}

/** exactOptionalPropertyTypes: the store's configs want absent keys, not `undefined`. */
function stripUndefined<T extends object>(o: T): T {
  return JSON.parse(JSON.stringify(o)) as T;
}
