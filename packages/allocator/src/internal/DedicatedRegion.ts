import type { AccessPolicy } from '../AccessPolicy.js';
import type { Block } from '../Block.js';
import type { Region } from '../Registrar.js';

/** A region registered for one block larger than an arena; deregistered on its release. */
export class DedicatedRegion {
  readonly access: AccessPolicy;
  readonly region: Region;
  readonly bytes: Uint8Array;
  readonly addr: number;
  readonly lkey: number;
  readonly rkey: number;
  readonly byteLength: number;
  block: Block | undefined = undefined;

  constructor(access: AccessPolicy, region: Region, byteLength: number) {
    this.access = access;
    this.region = region;
    this.bytes = region.bytes;
    this.addr = region.addr;
    this.lkey = region.lkey;
    this.rkey = region.rkey;
    this.byteLength = byteLength;
  }
}
