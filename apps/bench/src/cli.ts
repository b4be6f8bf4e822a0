// rdmajs-bench: RDMA vs kernel TCP, measured in the same run, reported as ratios.

import { readFileSync } from 'node:fs';
import { ibverbsStatus } from '@rdmajs/verbs';
import { SingleBar } from 'cli-progress';
import { Command, InvalidArgumentError, Option } from 'commander';
import { BASELINE_ROUNDS, checkBaselines } from './baselines/checkBaselines.js';
import { BASELINE_TOLERANCE, renderComparison } from './baselines/tcpBaseline.js';
import { machineInfo } from './machine.js';
import { parseReport, renderCompare } from './report/compare.js';
import { renderHeadlines } from './report/headlines.js';
import { writeJson } from './report/json.js';
import type { Report } from './report/Result.js';
import { summarize } from './report/summary.js';
import { renderTable } from './report/table.js';
import { scenarios } from './scenarios/index.js';
import { PINGPONG_ROUNDS } from './scenarios/verbs-pingpong.js';

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function sizeList(v: string): number[] {
  return v.split(',').map((s) => {
    const m = /^(\d+)\s*(k|ki|kib|m|mi|mib)?$/i.exec(s.trim());
    if (!m) throw new InvalidArgumentError(`bad size ${s}`);
    const unit = (m[2] ?? '').toLowerCase();
    return Number(m[1]) * (unit.startsWith('m') ? 1 << 20 : unit.startsWith('k') ? 1024 : 1);
  });
}

function oneSize(v: string): number {
  const sizes = sizeList(v);
  if (sizes.length !== 1 || !((sizes[0] as number) > 0))
    throw new InvalidArgumentError('one size, e.g. 8192, 16k or 64m');
  return sizes[0] as number;
}

const program = new Command('rdmajs-bench')
  .description('latency and CPU of rdmajs against Node TCP loopback, in one run')
  .argument('[scenario]', `one of: ${[...scenarios.keys()].join(', ')}`, 'evaluation')
  .addOption(
    new Option('--provider <name>', 'verbs provider').choices(['soft', 'ibverbs']).default('soft'),
  )
  .option('--iterations <n>', 'measured round trips for small sizes', positiveInt, 5000)
  .option(
    '--rounds <n>',
    `verbs-pingpong: rounds each size's rows are interleaved in (default ${PINGPONG_ROUNDS}; each round repeats the connection and warm-up)`,
    positiveInt,
  )
  .option('--sizes <list>', 'message sizes, e.g. 64,4k,64k,1m', sizeList, [
    64,
    4096,
    65536,
    1 << 20,
  ])
  .option(
    '--transports <list>',
    'tcp, rdma or both',
    (v: string) => v.split(',') as ('tcp' | 'rdma')[],
    ['tcp', 'rdma'],
  )
  .option(
    '--quick',
    'seconds, for CI and smoke tests: 300 iterations at 64 B and 4 KiB unless given',
  )
  .addOption(
    new Option(
      '--rdma-poll <policy>',
      "evaluation: completion polling of the RDMA client and shards (default: mux's, event)",
    ).choices(['event', 'adaptive', 'busy']),
  )
  .option(
    '--rdma-qp-pool <n>',
    "evaluation: RC QPs per connection, client and shards (default: mux's, 1)",
    positiveInt,
  )
  .option(
    '--rdma-eager <size>',
    "evaluation: eager (SEND) threshold, larger messages by READ, e.g. 16k (default: mux's, 32 KiB)",
    oneSize,
  )
  .option(
    '--rdma-recv-buffers <n>',
    "evaluation: receive buffers (credits) per connection (default: mux's, 256)",
    positiveInt,
  )
  .option(
    '--rdma-window <size>',
    "evaluation: receive window per connection, e.g. 64m (default: mux's, 64 MiB)",
    oneSize,
  )
  .option('--json <file>', 'also write the results as JSON')
  .option('--html <file>', 'also write an offline HTML report with charts')
  .option('--compare <old.json>', 'print the change against an earlier --json report')
  .option(
    '--check-baselines',
    `verbs-pingpong: also run baselines/tcp-pingpong.mjs interleaved with the bench's tcp ping-pong and fail if their median p50s differ by more than ${BASELINE_TOLERANCE}×`,
  )
  .option(
    '--baseline-rounds <n>',
    'interleaved rounds per size for --check-baselines',
    positiveInt,
    BASELINE_ROUNDS,
  )
  .action(
    async (
      name: string,
      opts: {
        provider: 'soft' | 'ibverbs';
        iterations: number;
        rounds?: number;
        sizes: number[];
        transports: ('tcp' | 'rdma')[];
        json?: string;
        html?: string;
        compare?: string;
        checkBaselines?: boolean;
        baselineRounds: number;
        quick?: boolean;
        rdmaPoll?: 'event' | 'adaptive' | 'busy';
        rdmaQpPool?: number;
        rdmaEager?: number;
        rdmaRecvBuffers?: number;
        rdmaWindow?: number;
      },
    ) => {
      // --quick only changes what the user left at its default.
      if (opts.quick) {
        if (program.getOptionValueSource('iterations') === 'default') opts.iterations = 300;
        if (program.getOptionValueSource('sizes') === 'default') opts.sizes = [64, 4096];
      }
      const scenario = scenarios.get(name);
      // Read the earlier report first: a bad file should fail before minutes of measuring.
      const old = opts.compare
        ? parseReport(readFileSync(opts.compare, 'utf8'), opts.compare)
        : undefined;
      if (!scenario)
        return program.error(
          `unknown scenario ${name}; known: ${[...scenarios.keys()].join(', ')}`,
        );
      if (opts.checkBaselines && name !== 'verbs-pingpong')
        return program.error('--check-baselines needs the verbs-pingpong scenario');
      // Say so before measuring anything, not after the TCP half of the run.
      const ibv = opts.provider === 'ibverbs' ? ibverbsStatus() : undefined;
      if (ibv && opts.transports.includes('rdma')) {
        if (ibv.devices.length === 0)
          return program.error(
            `the ibverbs provider has no device here (${ibv.reason ?? 'unknown reason'}); use --provider soft`,
          );
      }
      const bar =
        process.stderr.isTTY && !process.env.CI
          ? new SingleBar({ format: '{bar} {label}', clearOnComplete: true })
          : undefined;
      bar?.start(1, 0, { label: '' });
      const results = await scenario.run(
        {
          provider: opts.provider,
          iterations: opts.iterations,
          ...(opts.rounds === undefined ? {} : { rounds: opts.rounds }),
          sizes: opts.sizes,
          transports: opts.transports,
          quick: opts.quick === true,
          rdma: {
            ...(opts.rdmaPoll === undefined ? {} : { pollPolicy: opts.rdmaPoll }),
            ...(opts.rdmaQpPool === undefined ? {} : { qpPoolSize: opts.rdmaQpPool }),
            ...(opts.rdmaEager === undefined ? {} : { eagerThreshold: opts.rdmaEager }),
            ...(opts.rdmaRecvBuffers === undefined
              ? {}
              : { recvBufferCount: opts.rdmaRecvBuffers }),
            ...(opts.rdmaWindow === undefined ? {} : { windowBytes: opts.rdmaWindow }),
          },
        },
        (label) => {
          if (bar) bar.update(0, { label });
          else process.stderr.write(`… ${label}\n`);
        },
      );
      bar?.stop();
      const summary = { ...summarize(results), ...scenario.headlines?.(results) };
      const report: Report = {
        scenario: scenario.name,
        machine: machineInfo(
          opts.provider,
          ibv?.devices.map((d) => d.name),
        ),
        // The RDMA knobs with mux's defaults named (null: not given, mux's default applies).
        config: {
          scenario: scenario.name,
          ...opts,
          rdmaPoll: opts.rdmaPoll ?? null,
          rdmaQpPool: opts.rdmaQpPool ?? null,
          rdmaEager: opts.rdmaEager ?? null,
          rdmaRecvBuffers: opts.rdmaRecvBuffers ?? null,
          rdmaWindow: opts.rdmaWindow ?? null,
        },
        summary,
        results,
      };
      process.stdout.write(
        `\n${scenario.name}: ${scenario.description}\n\n${renderTable(results)}\n`,
      );
      const verdict = scenario.summarize?.(results);
      if (verdict) process.stdout.write(`\n${verdict}\n`);
      process.stdout.write(`\n${renderHeadlines(summary)}\n`);
      if (old) process.stdout.write(`\n${renderCompare(old, report)}\n`);
      if (opts.html) {
        // Loaded only when asked for: the charting library is large, and runs that only
        // print or write JSON (the rxe lane's VM reads node_modules over 9p) skip it.
        const { writeHtml } = await import('./report/html.js');
        await writeHtml(opts.html, report);
      }
      if (opts.checkBaselines) {
        const rows = await checkBaselines(
          opts.sizes,
          opts.iterations,
          opts.baselineRounds,
          (label) => process.stderr.write(`… ${label}\n`),
        );
        report.baselineCheck = rows;
        process.stdout.write(`\n${renderComparison(rows)}\n`);
        if (opts.json) writeJson(opts.json, report);
        const bad = rows.filter((r) => !r.ok);
        if (bad.length > 0)
          return program.error(
            `baseline check failed: the bench's tcp/pingpong p50 differs from the plain-Node script by more than ${BASELINE_TOLERANCE}× at ${bad.map((r) => `${r.sizeBytes} B (${r.ratio.toFixed(2)}×)`).join(', ')}`,
          );
        return;
      }
      if (opts.json) writeJson(opts.json, report);
    },
  );

// `pnpm bench -- --provider ibverbs`: pnpm passes the `--` on, and commander would take
// everything after it as positional arguments.
const argv = process.argv.slice(2);
if (argv[0] === '--') argv.shift();

program.parseAsync(argv, { from: 'user' }).catch((err: Error) => {
  // The causes too: 'receive repost failed' alone does not say what verbs refused.
  let line = `rdmajs-bench: ${err.message}`;
  for (let c = err.cause; c instanceof Error; c = c.cause) {
    const code = (c as { code?: unknown }).code;
    line += ` ← ${typeof code === 'string' ? `${code}: ` : ''}${c.message}`;
  }
  process.stderr.write(`${line}\n`);
  process.exit(1);
});
