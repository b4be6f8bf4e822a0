import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parse, View } from 'vega';
import { compile } from 'vega-lite';
import { chartsFor } from './charts.js';
import { resultCells } from './columns.js';
import { formatRatio } from './format.js';
import { GRPC_SAME_LOAD, HEADLINES } from './paper.js';
import type { Report } from './Result.js';

const esc = (s: unknown) =>
  String(s).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );

/** Renders a Vega-Lite spec to SVG in Node (no browser, no canvas: renderer 'none'). */
export async function renderSvg(spec: Parameters<typeof compile>[0]): Promise<string> {
  const view = new View(parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

function table(head: string[], rows: unknown[][]): string {
  const th = head.map((h) => `<th>${esc(h)}</th>`).join('');
  const trs = rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`);
  return `<table><thead><tr>${th}</tr></thead><tbody>${trs.join('')}</tbody></table>`;
}

/** A self-contained page: every chart is inline SVG, no script and nothing fetched. */
export async function renderHtml(report: Report): Promise<string> {
  const figures: string[] = [];
  for (const c of chartsFor(report)) {
    figures.push(
      `<figure data-chart="${esc(c.id)}"><figcaption>${esc(c.title)}</figcaption>${await renderSvg(c.spec)}</figure>`,
    );
  }
  const headlines = table(
    ['figure', 'ours (this run)', 'target (soft provider)', "paper's production figure (not ours)"],
    HEADLINES.map((h) => {
      const v = report.summary?.[h.key];
      return [
        h.label,
        typeof v === 'number' ? formatRatio(v) : 'not measured in this run',
        `≤ ${h.target.toFixed(2)}×`,
        h.paper === undefined ? h.paperText : `${h.paper.toFixed(2)}× (${h.paperText})`,
      ];
    }).concat(
      typeof report.summary?.grpcFetchMeanRatioSameLoad === 'number'
        ? [
            [
              GRPC_SAME_LOAD.label,
              formatRatio(report.summary.grpcFetchMeanRatioSameLoad),
              '',
              GRPC_SAME_LOAD.why,
            ],
          ]
        : [],
    ),
  );
  const cells = resultCells(report.results);
  const results = table(cells.header, cells.lines);
  const kv = (o: object) =>
    table(
      ['', ''],
      Object.entries(o).map(([k, v]) => [k, typeof v === 'object' ? JSON.stringify(v) : v]),
    );
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rdmajs-bench: ${esc(report.scenario)}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
figure{display:inline-block;margin:1em 1em 1em 0;vertical-align:top}figcaption{font-weight:600}
.note{color:#555}
</style></head><body>
<h1>rdmajs-bench: ${esc(report.scenario)}</h1>
<p class="note">Ratios are RDMA ÷ baseline measured in the same run. The paper's figures come from its production cluster and are shown for reference only; they are not ours.</p>
<h2>Headline ratios</h2>${headlines}
<h2>Charts</h2>${figures.join('\n')}
<h2>Results</h2>${results}
<h2>Machine</h2>${kv(report.machine)}
<h2>Configuration</h2>${kv(report.config ?? {})}
</body></html>
`;
}

export async function writeHtml(file: string, report: Report): Promise<void> {
  const html = await renderHtml(report);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, html);
}
