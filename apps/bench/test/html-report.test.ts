import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';

const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
// Kept after the run (bench-results/ is git-ignored) so a person can look at it.
const screenshot = fileURLToPath(new URL('../bench-results/report-test.png', import.meta.url));
const CHROMIUM = '/usr/bin/chromium';

describe('the HTML report', () => {
  it('renders every chart as SVG in headless Chromium, offline, and is screenshotted', async () => {
    expect(existsSync(CHROMIUM), `${CHROMIUM} missing: apt-get install -y chromium`).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), 'bench-html-'));
    const html = join(dir, 'report.html');
    const json = join(dir, 'report.json');
    execFileSync(
      process.execPath,
      ['--import', 'tsx', '--conditions=@rdmajs/source', cli, 'verbs-pingpong'].concat([
        '--iterations',
        '200',
        '--sizes',
        '64,4k',
        '--html',
        html,
        '--json',
        json,
      ]),
      { encoding: 'utf8', timeout: 120_000, env: { ...process.env, CI: '1' } },
    );
    const report = JSON.parse(readFileSync(json, 'utf8')) as { summary: Record<string, unknown> };
    expect(report.summary.fetchMeanRatio).toBeNull();
    // A fresh profile each run; playwright passes it as --user-data-dir.
    const browser = await chromium.launchPersistentContext(
      mkdtempSync(join(tmpdir(), 'bench-chromium-')),
      {
        executablePath: CHROMIUM,
        args: [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--disable-quic',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
        ],
      },
    );
    try {
      const page = await browser.newPage();
      const fetched: string[] = [];
      // Anything but the file itself would mean the report is not self-contained.
      await page.route('**/*', (route) => {
        const url = route.request().url();
        if (url !== pathToFileURL(html).href) fetched.push(url);
        return url === pathToFileURL(html).href ? route.continue() : route.abort();
      });
      await page.goto(pathToFileURL(html).href);
      const charts = await page.$$eval('figure[data-chart]', (figs) =>
        figs.map((f) => {
          const svg = f.querySelector('svg');
          const box = svg?.getBoundingClientRect();
          return {
            id: f.getAttribute('data-chart'),
            width: box?.width ?? 0,
            height: box?.height ?? 0,
            marks: svg?.querySelectorAll('path, rect, line').length ?? 0,
          };
        }),
      );
      expect(charts.map((c) => c.id)).toEqual([
        'cdf-64',
        'cdf-4096',
        'size-sweep',
        'cpu-per-op',
        'headlines',
      ]);
      for (const c of charts) {
        expect(c.width, c.id ?? '').toBeGreaterThan(100);
        expect(c.height, c.id ?? '').toBeGreaterThan(100);
        expect(c.marks, c.id ?? '').toBeGreaterThan(3);
      }
      expect(await page.textContent('body')).toContain("paper's production figure (not ours)");
      expect(fetched).toEqual([]);
      mkdirSync(join(screenshot, '..'), { recursive: true });
      await page.screenshot({ path: screenshot, fullPage: true });
      expect(statSync(screenshot).size).toBeGreaterThan(10_000);
    } finally {
      await browser.close();
    }
  });
});
