// Validation of a remote soft endpoint: untrusted input, checked field by field (own
// properties only) against the ranges the native side accepts.
import { RdmaError } from '../../errors.js';
import type { LinkAddress } from '../../types.js';
import { describe, invalid, isPlainObject, own } from '../validate.js';
import { LINK_VERSION } from './link/handshake.js';

export interface CheckedSoftEndpoint {
  bootId: string;
  pid: number;
  segFd: number;
  bellFd: number;
  slot: number;
  gen: number;
  qpn: number;
  nonce: number;
  tcp: LinkAddress | undefined;
}

// pid_max is at most 2^22; fds are ints; slots index kQpSlots (4096) descriptors; the
// segment nonce is below 2^48.
const RANGES = {
  pid: [1, 0x40_0000],
  segFd: [0, 0x7fff_ffff],
  bellFd: [0, 0x7fff_ffff],
  slot: [0, 4095],
  gen: [0, 0xffff_ffff],
  qpn: [0, 0xff_ffff],
  nonce: [0, 2 ** 48 - 1],
} as const;

function field(e: object, k: keyof typeof RANGES): number {
  const v = own(e, k);
  const [min, max] = RANGES[k];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw invalid(
      `remote soft endpoint: ${k} must be an integer in [${min}, ${max}], got ${describe(v)}`,
    );
  return v;
}

const LINK_KEY = /^[A-Za-z0-9_-]{43}$/; // 32 bytes, base64url

function checkLinkAddress(v: unknown): LinkAddress | undefined {
  if (v === undefined) return undefined;
  const host = isPlainObject(v) ? own(v, 'host') : undefined;
  const port = isPlainObject(v) ? own(v, 'port') : undefined;
  const key = isPlainObject(v) ? own(v, 'key') : undefined;
  const version = isPlainObject(v) ? own(v, 'version') : undefined;
  if (
    typeof key !== 'string' ||
    !LINK_KEY.test(key) ||
    typeof host !== 'string' ||
    host === '' ||
    host.length > 255 ||
    typeof port !== 'number' ||
    !Number.isInteger(port) ||
    port < 1 ||
    port > 65535
  ) {
    throw invalid(
      `remote soft endpoint: tcp must be { host, port, key } of a listening device, got ${describe(v)}`,
    );
  }
  if (version !== LINK_VERSION) {
    // Protocol 3 endpoints carry no version: their device dials where this one adopts.
    throw new RdmaError(
      'ERR_RDMA_LINK_VERSION',
      `remote soft endpoint: its TCP link speaks protocol ${typeof version === 'number' ? version : '3 or older'}, this device ${LINK_VERSION}: run the same @rdmajs/verbs on both sides`,
    );
  }
  return { host, port, key, version };
}

export function checkSoftEndpoint(remote: unknown): CheckedSoftEndpoint {
  if (!isPlainObject(remote))
    throw invalid(`remote endpoint must be a plain object, got ${describe(remote)}`);
  const provider = own(remote, 'provider');
  if (provider !== 'soft')
    throw invalid(`remote endpoint is of provider ${describe(provider)}, this QP is soft`);
  const bootId = own(remote, 'bootId');
  if (typeof bootId !== 'string' || bootId.length === 0 || bootId.length > 64)
    throw invalid(`remote soft endpoint: bootId must be a string, got ${describe(bootId)}`);
  return {
    bootId,
    pid: field(remote, 'pid'),
    segFd: field(remote, 'segFd'),
    bellFd: field(remote, 'bellFd'),
    slot: field(remote, 'slot'),
    gen: field(remote, 'gen'),
    qpn: field(remote, 'qpn'),
    nonce: field(remote, 'nonce'),
    tcp: checkLinkAddress(own(remote, 'tcp')),
  };
}

export function notListening(): RdmaError {
  return new RdmaError(
    'ERR_RDMA_UNREACHABLE',
    'the remote soft endpoint is on another host (or the TCP link was chosen) and does not listen: call `await device.listen()` on its device first',
  );
}
