import type { TopLevelSpec } from 'vega-lite';
import { formatSize } from './format.js';
import { HEADLINES } from './paper.js';
import type { Report, Result } from './Result.js';

/** One chart of the HTML report: a Vega-Lite spec, with its data inlined. */
export interface Chart {
  id: string;
  title: string;
  spec: TopLevelSpec;
}

const series = (r: Result) => `${r.transport} ${r.op}`;
const SCHEMA = 'https://vega.github.io/schema/vega-lite/v6.json';
const WIDTH = 560;
const HEIGHT = 300;

/** Latency CDFs (one chart per size), a size sweep, CPU per op, and the headline ratios. */
export function chartsFor(report: Report): Chart[] {
  const charts: Chart[] = [];
  const withCdf = report.results.filter((r) => Array.isArray(r.cdf) && r.cdf.length > 0);
  const sizes = [...new Set(withCdf.map((r) => r.sizeBytes))].sort((a, b) => a - b);
  for (const size of sizes) {
    const values = withCdf
      .filter((r) => r.sizeBytes === size)
      .flatMap((r) => (r.cdf ?? []).map((c) => ({ series: series(r), us: c.us, p: c.p })));
    charts.push({
      id: `cdf-${size}`,
      title: `Latency CDF, ${formatSize(size)}`,
      spec: {
        $schema: SCHEMA,
        width: WIDTH,
        height: HEIGHT,
        data: { values },
        mark: { type: 'line', point: true },
        encoding: {
          x: { field: 'us', type: 'quantitative', scale: { type: 'log' }, title: 'latency (µs)' },
          y: { field: 'p', type: 'quantitative', title: 'percentile' },
          color: { field: 'series', type: 'nominal', title: 'row', legend: { labelLimit: 400 } },
        },
      },
    });
  }
  const latencyRows = report.results.filter((r) => !r.op.includes('throughput') && r.sizeBytes > 0);
  if (new Set(latencyRows.map((r) => r.sizeBytes)).size > 1) {
    charts.push({
      id: 'size-sweep',
      title: 'p50 latency vs message size',
      spec: {
        $schema: SCHEMA,
        width: WIDTH,
        height: HEIGHT,
        data: {
          values: latencyRows.map((r) => ({ series: series(r), size: r.sizeBytes, p50: r.p50Us })),
        },
        mark: { type: 'line', point: true },
        encoding: {
          x: {
            field: 'size',
            type: 'quantitative',
            scale: { type: 'log', base: 2 },
            title: 'message size (bytes)',
          },
          y: { field: 'p50', type: 'quantitative', scale: { type: 'log' }, title: 'p50 (µs)' },
          color: { field: 'series', type: 'nominal', title: 'row', legend: { labelLimit: 400 } },
        },
      },
    });
  }
  charts.push({
    id: 'cpu-per-op',
    title: 'CPU per round trip, all processes',
    spec: {
      $schema: SCHEMA,
      width: WIDTH,
      height: HEIGHT,
      data: {
        // Per-message rows only: throughput and idle rows count CPU per MiB or per second.
        values: latencyRows.map((r) => ({
          series: series(r),
          size: formatSize(r.sizeBytes),
          cpu: r.cpuUsPerOp,
        })),
      },
      mark: 'bar',
      encoding: {
        x: { field: 'series', type: 'nominal', title: null, axis: { labelAngle: -40 } },
        xOffset: { field: 'size', type: 'nominal' },
        y: { field: 'cpu', type: 'quantitative', title: 'CPU µs per op' },
        color: { field: 'size', type: 'nominal', title: 'size' },
      },
    },
  });
  charts.push(...evaluationCharts(report.results));
  const headlines = HEADLINES.flatMap((h) => {
    const ours = report.summary?.[h.key];
    const rows = [];
    if (typeof ours === 'number')
      rows.push({ figure: h.label, source: 'ours (this run)', ratio: ours });
    if (h.paper !== undefined)
      rows.push({ figure: h.label, source: "paper's production figure", ratio: h.paper });
    return rows;
  });
  charts.push({
    id: 'headlines',
    title: "Headline ratios: ours beside the paper's production figures",
    spec: {
      $schema: SCHEMA,
      width: WIDTH,
      height: HEIGHT,
      data: { values: headlines },
      mark: 'bar',
      encoding: {
        y: { field: 'figure', type: 'nominal', title: null, axis: { labelLimit: 300 } },
        yOffset: { field: 'source', type: 'nominal' },
        x: { field: 'ratio', type: 'quantitative', title: 'RDMA ÷ baseline (lower is better)' },
        color: { field: 'source', type: 'nominal', title: null, legend: { labelLimit: 300 } },
      },
    },
  });
  return charts;
}

/** The evaluation's own charts: fetch latency against offered load, push p99 against fan-in. */
function evaluationCharts(results: readonly Result[]): Chart[] {
  const charts: Chart[] = [];
  const fetch = results.filter((r) => typeof r.offeredRps === 'number');
  if (fetch.length > 0) {
    charts.push({
      id: 'fetch-vs-load',
      title: 'Inference fetch: mean and p99 latency vs offered load',
      spec: {
        $schema: SCHEMA,
        width: WIDTH,
        height: HEIGHT,
        data: {
          values: fetch.flatMap((r) => [
            { transport: r.transport, stat: 'p99', load: r.offeredRps, us: r.p99Us },
            { transport: r.transport, stat: 'mean', load: r.offeredRps, us: r.meanUs },
          ]),
        },
        mark: { type: 'line', point: true },
        encoding: {
          x: { field: 'load', type: 'quantitative', title: 'offered load (requests/s)' },
          y: { field: 'us', type: 'quantitative', scale: { type: 'log' }, title: 'latency (µs)' },
          color: { field: 'transport', type: 'nominal', title: 'transport' },
          strokeDash: { field: 'stat', type: 'nominal', title: 'statistic' },
        },
      },
    });
  }
  charts.push(...gcCharts(results));
  const push = results.filter((r) => typeof r.concurrency === 'number');
  if (push.length > 0) {
    charts.push({
      id: 'push-vs-fanin',
      title: 'Training push incast: p99 latency vs clients pushing at once',
      spec: {
        $schema: SCHEMA,
        width: WIDTH,
        height: HEIGHT,
        data: {
          values: push.map((r) => ({
            transport: r.transport,
            clients: r.concurrency,
            p99: r.p99Us,
          })),
        },
        mark: { type: 'line', point: true },
        encoding: {
          x: {
            field: 'clients',
            type: 'quantitative',
            scale: { type: 'log', base: 2 },
            title: 'clients pushing at once',
          },
          y: { field: 'p99', type: 'quantitative', scale: { type: 'log' }, title: 'push p99 (µs)' },
          color: { field: 'transport', type: 'nominal', title: 'transport' },
        },
      },
    });
  }
  return charts;
}

/** One process's GCs in a row, as the evaluation puts them in `gc`. */
interface RowProcessGc {
  process: string;
  major: number;
  minor: number;
  pauseMs: number;
}

const processGcs = (r: Result): RowProcessGc[] =>
  Array.isArray(r.gc)
    ? (r.gc as RowProcessGc[]).filter(
        (g) =>
          typeof g?.process === 'string' && Number.isFinite(g.major) && Number.isFinite(g.pauseMs),
      )
    : [];

/** Requests (or pushes) a row completed in the window its GCs were counted over. */
const opsOf = (r: Result): number =>
  typeof r.gcOps === 'number' && r.gcOps > 0 ? r.gcOps : Number.NaN;

/**
 * Full GCs per 1 000 requests and GC pause per request of every row, stacked by process
 * (client process, each shard or gRPC server): where the tail's pauses come from.
 */
function gcCharts(results: readonly Result[]): Chart[] {
  const rows = results.filter((r) => processGcs(r).length > 0 && Number.isFinite(opsOf(r)));
  if (rows.length === 0) return [];
  const values = rows.flatMap((r) => {
    const ops = opsOf(r);
    return processGcs(r).map((g) => ({
      row: series(r),
      process: g.process,
      majorPer1k: (g.major * 1000) / ops,
      pauseUsPerOp: (g.pauseMs * 1000) / ops,
    }));
  });
  const chart = (id: string, title: string, field: string, axis: string): Chart => ({
    id,
    title,
    spec: {
      $schema: SCHEMA,
      width: WIDTH,
      height: { step: 12 },
      data: { values },
      mark: 'bar',
      encoding: {
        y: { field: 'row', type: 'nominal', title: null, sort: null, axis: { labelLimit: 300 } },
        x: { field, type: 'quantitative', stack: 'zero', title: axis },
        color: { field: 'process', type: 'nominal', title: 'process' },
      },
    },
  });
  return [
    chart(
      'gc-major',
      'Full (Mark-Compact) GCs per 1 000 requests, every process of the row',
      'majorPer1k',
      'full GCs per 1 000 requests (or pushes)',
    ),
    chart(
      'gc-pause',
      'GC pause per request, every process of the row',
      'pauseUsPerOp',
      'GC pause µs per request (or push), all GC kinds',
    ),
  ];
}
