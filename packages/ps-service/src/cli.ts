#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import {
  MIN_SECRET_BYTES,
  type RdmaAblation,
  RdmaTransport,
  type RdmaTransportOptions,
  type Transport,
} from '@rdmajs/mux';
import { PS_CREDIT_FLUSH_MS } from '@rdmajs/ps-wire';
import { TcpTransport } from '@rdmajs/tcp';
import { openDevice } from '@rdmajs/verbs';
import { Command, InvalidArgumentError, Option } from 'commander';
import { PsServiceError } from './errors.js';
import { heapAllocator } from './internal/heapMemory.js';
import { readSecret } from './internal/readSecret.js';
import { jsonLogger, type LogLevel } from './Logger.js';
import { PsService } from './PsService.js';
import { parseServiceTables } from './ServiceConfig.js';
import { DEFAULT_ETCD_PREFIX } from './ShardRegistration.js';

/** The environment variable that may hold the shared secret (never a command-line flag). */
export const SECRET_ENV = 'RDMAJS_PS_SECRET';

const int =
  (what: string, min: number) =>
  (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${what} must be an integer ≥ ${min}`);
    return n;
  };

function parseListen(v: string): { host: string; port: number } {
  const m = /^(.*):(\d{1,5})$/.exec(v);
  const port = Number(m?.[2]);
  if (m === null || !(port >= 0 && port <= 65_535))
    throw new InvalidArgumentError('expected host:port');
  return { host: (m[1] ?? '').replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port };
}

/** `host:port[,port…]`: one port per transport of `--transport`, in its order. */
function parseListenPorts(v: string): { host: string; ports: number[] } {
  const m = /^(.*):(\d{1,5}(?:,\d{1,5})*)$/.exec(v);
  const ports = (m?.[2] ?? '').split(',').map(Number);
  if (m === null || !ports.every((p) => p >= 0 && p <= 65_535))
    throw new InvalidArgumentError('expected host:port or host:port,port');
  return { host: (m[1] ?? '').replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', ports };
}

const TRANSPORTS = ['rdma', 'tcp'] as const;
type TransportName = (typeof TRANSPORTS)[number];

function parseTransports(v: string): TransportName[] {
  const names = v.split(',');
  for (const n of names) {
    if (!(TRANSPORTS as readonly string[]).includes(n))
      throw new InvalidArgumentError(`transports are ${TRANSPORTS.join(', ')}; got ${n}`);
  }
  if (new Set(names).size !== names.length) throw new InvalidArgumentError('a transport twice');
  return names as TransportName[];
}

/** The ports of `--listen` matched to the transports (port 0 alone: any free port for each). */
function portsFor(names: TransportName[], ports: number[]): number[] {
  if (ports.length === names.length) return ports;
  if (ports.length === 1 && ports[0] === 0) return names.map(() => 0);
  throw new PsServiceError(
    'ERR_PS_SERVICE_CONFIG',
    `--listen gives ${ports.length} port(s) for ${names.length} transports (${names.join(',')}): one each, or :0`,
  );
}

interface RdmaCliOptions {
  provider: 'auto' | 'soft' | 'ibverbs';
  device?: string;
  /** The RdmaTransport options the flags gave; its own defaults (and validation) apply otherwise. */
  transport: RdmaTransportOptions;
}

function transportOf(
  name: TransportName,
  rdma: RdmaCliOptions,
  tcpFrameProtection: 'aead' | 'none',
): Transport {
  // Frames that span socket chunks are assembled in reused heap blocks, not a fresh buffer each.
  if (name === 'tcp')
    return new TcpTransport({
      creditFlushMs: PS_CREDIT_FLUSH_MS,
      frameProtection: tcpFrameProtection,
      receiveAllocator: heapAllocator(),
    });
  // Soft provider by default: RDMA semantics over the kernel, no NIC needed.
  const device = openDevice({
    provider: rdma.provider,
    ...(rdma.device === undefined ? {} : { name: rdma.device }),
  });
  return new RdmaTransport({ creditFlushMs: PS_CREDIT_FLUSH_MS, ...rdma.transport, device });
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('rdmajs-ps-server')
    .description('Serve a parameter-server shard (sparse tables and dense tensors) over rdmajs RPC')
    .requiredOption('--tables <file>', 'table definitions (JSON, validated)')
    .requiredOption('--shard-id <id>', 'this shard (1–64 of [A-Za-z0-9_-])')
    .option(
      '--listen <host:port[,port]>',
      'address to listen on: one port per transport, in --transport order (:0 any free ports)',
      parseListenPorts,
      { host: '127.0.0.1', ports: [0] },
    )
    .option(
      '--transport <names>',
      'transports to listen on at once, comma-separated: rdma, tcp (clients choose)',
      parseTransports,
      ['tcp'] as TransportName[],
    )
    .addOption(
      new Option('--rdma-provider <provider>', 'verbs provider of the rdma transport')
        .choices(['soft', 'ibverbs', 'auto'])
        .default('soft'),
    )
    .option('--rdma-device <name>', 'verbs device of the rdma transport (default: the first)')
    .option(
      '--rdma-eager-threshold <bytes>',
      'rdma: messages up to this size go by SEND, larger by READ (default 32768, as mux; both sides: the smaller wins)',
      int('--rdma-eager-threshold', 64),
    )
    .addOption(
      new Option('--rdma-poll <policy>', 'rdma completion polling')
        .choices(['event', 'adaptive', 'busy'])
        .default('event'),
    )
    .option(
      '--rdma-qp-pool <n>',
      'rdma: RC QPs per client connection carrying its channels (default 1)',
      int('--rdma-qp-pool', 1),
    )
    .option(
      '--rdma-recv-buffers <n>',
      "rdma: the most receive buffers (credits) one client's lease of the shared receive pool grows to while busy (default 256; 16 at connect)",
      int('--rdma-recv-buffers', 1),
    )
    .option(
      '--rdma-window-bytes <bytes>',
      'rdma: receive window a client may fill before its sends wait (default 64 MiB)',
      int('--rdma-window-bytes', 1),
    )
    .option(
      '--rdma-max-registered <bytes>',
      "rdma: registered memory of the transport, the shared receive pool and every client's reply pool included (default 1 GiB: about 200 pulling clients, each with a 4 MiB reply arena)",
      int('--rdma-max-registered', 1),
    )
    .addOption(
      new Option(
        '--rdma-zero-copy <on|off>',
        'rdma: build replies in registered memory (on) or on the heap, copied by the transport into a bounce buffer (off)',
      )
        .choices(['on', 'off'])
        .default('on'),
    )
    .option(
      '--rdma-ablate <lessons>',
      'rdma, for measurement only: lessons switched off, comma-separated: credits (SENDs without receive credits, RNR retried by the NIC), send-window (no send window); clients must switch off the same',
      (v: string) => v.split(',') as RdmaAblation[],
    )
    .addOption(
      new Option(
        '--tcp-frame-protection <aead|none>',
        'tcp: frames sealed with the connection keys (aead) or in clear (none, a trusted network); clients must match',
      )
        .choices(['aead', 'none'])
        .default('aead'),
    )
    .option('--data-dir <dir>', 'snapshots + push log (restored at start); in memory without it')
    .option(
      '--snapshot-interval <ms>',
      'snapshot period (needs --data-dir)',
      int('--snapshot-interval', 1),
    )
    .option(
      '--max-batch-keys <n>',
      'largest batch one request may carry',
      int('--max-batch-keys', 1),
    )
    .option(
      '--metrics <host:port>',
      'serve Prometheus metrics at http://host:port/metrics',
      parseListen,
    )
    .option('--etcd <urls>', 'register in the etcd shard map (comma-separated endpoints)')
    .option('--etcd-prefix <prefix>', 'the shard map key prefix', DEFAULT_ETCD_PREFIX)
    .option('--advertise <host>', 'the host clients reach this shard at (etcd entry)')
    .option(
      '--secret-file <file>',
      `file holding the shared secret, ≥ ${MIN_SECRET_BYTES} bytes, mode 600 (else $${SECRET_ENV})`,
    )
    .addOption(
      new Option('--log-level <level>', 'log level')
        .choices(['debug', 'info', 'warn', 'error'])
        .default('info'),
    )
    .addHelpText(
      'after',
      `\nThe secret is never taken from the command line: use --secret-file or $${SECRET_ENV}.`,
    )
    .exitOverride()
    .parse(argv);
  const o = program.opts<{
    tables: string;
    shardId: string;
    listen: { host: string; ports: number[] };
    transport: TransportName[];
    rdmaProvider: 'auto' | 'soft' | 'ibverbs';
    rdmaDevice?: string;
    rdmaEagerThreshold?: number;
    rdmaPoll: 'event' | 'adaptive' | 'busy';
    rdmaQpPool?: number;
    rdmaRecvBuffers?: number;
    rdmaWindowBytes?: number;
    rdmaMaxRegistered?: number;
    rdmaZeroCopy: 'on' | 'off';
    rdmaAblate?: RdmaAblation[];
    tcpFrameProtection: 'aead' | 'none';
    dataDir?: string;
    snapshotInterval?: number;
    maxBatchKeys?: number;
    secretFile?: string;
    metrics?: { host: string; port: number };
    etcd?: string;
    etcdPrefix: string;
    advertise?: string;
    logLevel: LogLevel;
  }>();
  // First: the variable leaves the environment even when the start fails later.
  const secret = readSecret({ file: o.secretFile, env: process.env, name: SECRET_ENV });
  const logger = jsonLogger({
    level: o.logLevel,
    out: (line) => process.stdout.write(line),
    base: { shard: o.shardId, pid: process.pid },
  });
  let tablesJson: unknown;
  try {
    tablesJson = JSON.parse(readFileSync(o.tables, 'utf8'));
  } catch (err) {
    throw new PsServiceError(
      'ERR_PS_SERVICE_CONFIG',
      `table file ${o.tables}: ${(err as Error).message}`,
    );
  }
  const ports = portsFor(o.transport, o.listen.ports);
  const rdmaOptions: RdmaCliOptions = {
    provider: o.rdmaProvider,
    ...(o.rdmaDevice === undefined ? {} : { device: o.rdmaDevice }),
    transport: {
      pollPolicy: o.rdmaPoll,
      ...(o.rdmaEagerThreshold === undefined ? {} : { eagerThreshold: o.rdmaEagerThreshold }),
      ...(o.rdmaQpPool === undefined ? {} : { qpPoolSize: o.rdmaQpPool }),
      ...(o.rdmaRecvBuffers === undefined ? {} : { recvBufferCount: o.rdmaRecvBuffers }),
      ...(o.rdmaWindowBytes === undefined ? {} : { windowBytes: o.rdmaWindowBytes }),
      ...(o.rdmaMaxRegistered === undefined ? {} : { maxRegisteredBytes: o.rdmaMaxRegistered }),
      ...(o.rdmaAblate === undefined ? {} : { ablations: o.rdmaAblate }),
    },
  };
  const service = await PsService.start({
    listen: o.transport.map((name, i) => ({
      transport: transportOf(name, rdmaOptions, o.tcpFrameProtection),
      host: o.listen.host,
      port: ports[i] as number,
    })),
    secret,
    shardId: o.shardId,
    tables: parseServiceTables(tablesJson),
    ...(o.dataDir === undefined ? {} : { dir: o.dataDir }),
    ...(o.snapshotInterval === undefined ? {} : { snapshotIntervalMs: o.snapshotInterval }),
    ...(o.maxBatchKeys === undefined ? {} : { maxBatchKeys: o.maxBatchKeys }),
    zeroCopyReplies: o.rdmaZeroCopy === 'on',
    ...(o.metrics === undefined ? {} : { metrics: o.metrics }),
    ...(o.etcd === undefined
      ? {}
      : {
          etcd: {
            hosts: o.etcd.split(','),
            prefix: o.etcdPrefix,
            ...(o.advertise === undefined ? {} : { advertiseHost: o.advertise }),
          },
        }),
    logger,
  });
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.log('info', 'signal', { signal });
    service.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.log('error', 'shutdown failed', { error: err });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main(process.argv).catch((err: unknown) => {
  const e = err as { code?: string; message?: string; exitCode?: number };
  // commander's own exits (help, version) carry exitCode; everything else is a failed start.
  if (typeof e.code === 'string' && e.code.startsWith('commander.')) process.exit(e.exitCode ?? 1);
  process.stdout.write(
    `${JSON.stringify({ time: new Date().toISOString(), level: 'error', msg: 'start failed', error: { code: e.code, message: e.message } })}\n`,
  );
  process.exit(1);
});
