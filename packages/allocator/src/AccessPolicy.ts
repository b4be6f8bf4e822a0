import { invalidArg } from './errors.js';
import { describeValue } from './internal/validate.js';

/**
 * What peers may do with a block's memory. Every policy includes local write (the
 * application fills blocks and receives into them); only the `remote-*` policies expose an
 * rkey that a peer can use. Each policy has arenas of its own, so memory is exposed to peers
 * only where it is needed.
 */
export type AccessPolicy = 'local' | 'remote-read' | 'remote-write' | 'remote-read-write';

/**
 * Memory access flags, numerically equal to `enum ibv_access_flags`: the same name, values and
 * meaning as `Access` of @rdmajs/verbs (copied, so the allocator needs no verbs at run time).
 * These are the `access` numbers a Registrar receives.
 */
export const Access = {
  LocalWrite: 1,
  RemoteWrite: 2,
  RemoteRead: 4,
  RemoteAtomic: 8,
} as const;

/** Every policy, in a stable order (the order of `stats().arenas` grouping). */
export const ACCESS_POLICIES: readonly AccessPolicy[] = [
  'local',
  'remote-read',
  'remote-write',
  'remote-read-write',
];

const FLAGS: readonly number[] = [
  Access.LocalWrite,
  Access.LocalWrite | Access.RemoteRead,
  Access.LocalWrite | Access.RemoteWrite,
  Access.LocalWrite | Access.RemoteRead | Access.RemoteWrite,
];

/** The registration flags a policy stands for. Throws ERR_ALLOC_INVALID_ARG for an unknown policy. */
export function accessFlags(policy: AccessPolicy): number {
  return FLAGS[policyIndex(policy)] as number;
}

/** Index of a policy in ACCESS_POLICIES; throws ERR_ALLOC_INVALID_ARG for an unknown one. */
export function policyIndex(policy: AccessPolicy): number {
  switch (policy) {
    case 'local':
      return 0;
    case 'remote-read':
      return 1;
    case 'remote-write':
      return 2;
    case 'remote-read-write':
      return 3;
    default:
      throw invalidArg(
        `unknown access policy ${describeValue(policy)} (expected ${ACCESS_POLICIES.join(', ')})`,
      );
  }
}
