import { MuxError } from '../errors.js';
import { ABLATE_CREDITS, ABLATE_SEND_WINDOW, MAX_SETUP_QPS } from './RdmaSetup.js';

/** How completions are reaped: CQ events only, a short spin after activity, or always spin. */
export type PollPolicy = 'event' | 'adaptive' | 'busy';

/**
 * A lesson switched off, for measurement only (the evaluation's ablations); both sides must
 * name the same ones. 'credits': SENDs go without receive credits, QPs retry RNR forever
 * (`rnrRetry` 7) instead. 'send-window': no send window or shared budget, and the receiver
 * does not enforce the window it announced.
 */
export type RdmaAblation = 'credits' | 'send-window';

const ABLATION_BITS: Readonly<Record<RdmaAblation, number>> = {
  credits: ABLATE_CREDITS,
  'send-window': ABLATE_SEND_WINDOW,
};
const ABLATIONS = Object.keys(ABLATION_BITS) as RdmaAblation[];

export interface RdmaTuning {
  /** RC QPs per peer carrying every channel. Default 1. */
  qpPoolSize?: number;
  /**
   * Messages up to this size go eager (SEND); larger ones by rendezvous READ. Default 32 KiB
   * (DEFAULT_EAGER_THRESHOLD).
   */
  eagerThreshold?: number;
  /**
   * Most receive buffers (credits) one peer may lease from the transport's shared receive
   * pool while it is busy. Default 256.
   */
  recvBufferCount?: number;
  /**
   * Credits a peer is granted at the handshake (its lease when idle), at most
   * `recvBufferCount`. Default 16 (DEFAULT_RECV_CREDITS).
   */
  recvCredits?: number;
  /** A sender that used no credit for this long gives its grown lease back. Default 1 000. */
  leaseIdleMs?: number;
  pollPolicy?: PollPolicy;
  /** Lessons switched off, for measurement only (see RdmaAblation). Default none. */
  ablations?: readonly RdmaAblation[];
}

export interface ParsedRdmaTuning {
  readonly qpPoolSize: number;
  readonly eagerThreshold: number;
  readonly recvBufferCount: number;
  readonly recvCredits: number;
  readonly leaseIdleMs: number;
  readonly pollPolicy: PollPolicy;
  /** Bit set of the ablations (RdmaSetup's ABLATE_* bits), 0 for the full system. */
  readonly ablations: number;
}

/**
 * Measured (`pnpm bench mux`, MUX_BENCH_EAGER): on soft an eager SEND of 16–256 KiB takes
 * half the round trip and CPU of a rendezvous (Ready, READ, Done: a round trip and a wake-up
 * of each side more), so the threshold is bounded by receive-buffer memory, not speed: 32 KiB
 * covers a 256-key pull reply or push of dim 64 per shard; a receive buffer takes 36 KiB of
 * registered pages (a peer's lease of 16: 576 KiB; 256 when busy: 9 MiB).
 */
export const DEFAULT_EAGER_THRESHOLD = 32 * 1024;

/** Eager buffers also hold the frame header; this bounds per-buffer memory. */
export const MAX_EAGER_THRESHOLD = 1 << 20;
export const MAX_RECV_BUFFERS = 1 << 16;
/**
 * A peer's lease at the handshake: enough for a ping-pong and a short pipeline; a busy peer's
 * lease grows towards `recvBufferCount`. 16 × 36 KiB = 576 KiB per idle connection with the
 * default eager threshold (256 buffers, 9 MiB, when every connection had its own).
 */
export const DEFAULT_RECV_CREDITS = 16;

function int(name: string, v: number | undefined, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new MuxError('ERR_MUX_INVALID_ARG', `${name} must be an integer in ${min}..${max}`);
  }
  return v;
}

/** Validates user options synchronously (user mistakes throw ERR_MUX_INVALID_ARG). */
export function parseRdmaTuning(o: RdmaTuning = {}): ParsedRdmaTuning {
  const pollPolicy = o.pollPolicy ?? 'event';
  if (pollPolicy !== 'event' && pollPolicy !== 'adaptive' && pollPolicy !== 'busy') {
    throw new MuxError('ERR_MUX_INVALID_ARG', `pollPolicy must be event, adaptive or busy`);
  }
  const recvBufferCount = int('recvBufferCount', o.recvBufferCount, 256, 4, MAX_RECV_BUFFERS);
  return {
    qpPoolSize: int('qpPoolSize', o.qpPoolSize, 1, 1, MAX_SETUP_QPS),
    eagerThreshold: int(
      'eagerThreshold',
      o.eagerThreshold,
      DEFAULT_EAGER_THRESHOLD,
      64,
      MAX_EAGER_THRESHOLD,
    ),
    recvBufferCount,
    recvCredits: int(
      'recvCredits',
      o.recvCredits,
      Math.min(DEFAULT_RECV_CREDITS, recvBufferCount),
      4,
      recvBufferCount,
    ),
    leaseIdleMs: int('leaseIdleMs', o.leaseIdleMs, 1_000, 1, 2_147_483_647),
    pollPolicy,
    ablations: parseAblations(o.ablations),
  };
}

function parseAblations(list: readonly RdmaAblation[] | undefined): number {
  if (list === undefined) return 0;
  if (!Array.isArray(list)) {
    throw new MuxError('ERR_MUX_INVALID_ARG', 'ablations must be an array');
  }
  let bits = 0;
  for (const a of list as readonly RdmaAblation[]) {
    if (!ABLATIONS.includes(a)) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        `ablations: unknown ${JSON.stringify(a)} (one of ${ABLATIONS.join(', ')})`,
      );
    }
    bits |= ABLATION_BITS[a];
  }
  return bits;
}

/** The names of an ablation bit set, for messages and stats. */
export function ablationNames(bits: number): RdmaAblation[] {
  return ABLATIONS.filter((a) => (bits & ABLATION_BITS[a]) !== 0);
}
