import {
  type Connection,
  encodeReadDescriptor,
  RdmaTransport,
  READ_DESCRIPTOR_BYTES,
  type ReadRegion,
  type Transport,
} from '@rdmajs/mux';
import { heapRowMemory, type RowBlock, type RowMemory } from '@rdmajs/ps-server';

/**
 * The memory of a shard's `oneSidedRead` tables and who may learn where it is. Each such
 * table's one region (ps-server's store view) is a read region of the shard's RDMA transport:
 * the region IS the table's memory, written in place by the store and READ by clients without
 * waking the shard. A region's 32-byte descriptor goes only into table-info replies on
 * connections of that transport (authenticated RPC sessions that can READ); TCP clients get
 * none and pull two-sided.
 *
 * Made before the store (the store takes its regions while its tables are built), so the
 * transport exists first; the regions close with the store (RowBlock.release). A shard has at
 * most one RDMA listener (listeners are one per transport name): the first RdmaTransport
 * among them owns the regions. Without one, readable tables live on the heap.
 */
export class ReadableTables {
  readonly #transport: RdmaTransport | undefined;
  readonly #descriptors = new Map<string, Uint8Array>();
  /** Connections accepted by the regions' transport that can READ. */
  readonly #readers = new WeakSet<Connection>();
  /** What the store allocates rows from: the heap, and readable regions from the transport. */
  readonly memory: RowMemory;

  constructor(transports: readonly Transport[]) {
    this.#transport = transports.find((t): t is RdmaTransport => t instanceof RdmaTransport);
    const t = this.#transport;
    this.memory =
      t === undefined
        ? heapRowMemory
        : { alloc: heapRowMemory.alloc, allocReadable: (n, table) => this.#region(t, n, table) };
  }

  #region(t: RdmaTransport, bytes: number, table: string): RowBlock {
    const region: ReadRegion = t.allocReadRegion(bytes);
    const d = new Uint8Array(READ_DESCRIPTOR_BYTES);
    encodeReadDescriptor(region.descriptor, d);
    this.#descriptors.set(table, d);
    return {
      bytes: region.bytes,
      release: () => {
        this.#descriptors.delete(table);
        region.close();
      },
    };
  }

  /** Tables whose regions peers may READ. */
  get size(): number {
    return this.#descriptors.size;
  }

  /** Notes a connection accepted by a listener of `transport`. */
  admit(connection: Connection, transport: Transport): void {
    if (transport === this.#transport && connection.supportsRead) this.#readers.add(connection);
  }

  /**
   * The descriptors to hand a caller on `connection`: every readable table's, when it is a
   * connection of the regions' transport that supports reads; otherwise none.
   */
  descriptorsFor(connection: Connection | undefined): ReadonlyMap<string, Uint8Array> | undefined {
    if (connection === undefined || this.#descriptors.size === 0) return undefined;
    return this.#readers.has(connection) ? this.#descriptors : undefined;
  }
}
