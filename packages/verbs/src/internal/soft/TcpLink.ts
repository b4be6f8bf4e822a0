// The soft provider's TCP link: carries work requests to a peer on another host (or on
// this one, when chosen for tests). The target's native code runs each operation with
// the same responder logic as the shared-memory path; JS only moves frames.
//
// request  (52 B + payload): len u32, reqId u32, opcode u8, pad×3, imm u32, remoteAddr f64,
//                            rkey u32, length u32, dstSlot u32, dstGen u32, srcQpn u32, srcPid u32,
//                            token u32 (names the WR: a resend after a timeout carries the same
//                            one, and the target answers it from memory instead of running it twice)
// response (12 B + data):    len u32, reqId u32, outcome u8, status u8, rnrTimer u16, pad u32
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { LinkAddress } from '../../types.js';
import { ABI } from '../abi.js';
import type { SoftNativeDevice } from '../native.js';

const REQ_HEADER = 52;
const RES_HEADER = 12;
const OP_READ = ABI.OP_RDMA_READ;
const OUTCOME_TRANSPORT = ABI.LINK_TRANSPORT;

export type LinkReply = (
  outcome: number,
  status: number,
  rnrTimer: number,
  data?: Uint8Array,
) => void;

/** Splits a byte stream into length-prefixed frames of `min`..`max` bytes (each byte is
 * copied at most once, however many chunks a large frame arrives in). */
class FrameReader {
  #chunks: Buffer[] = [];
  #have = 0;
  readonly #min: number;
  readonly #max: number;

  constructor(min: number, max: number) {
    this.#min = min;
    this.#max = max;
  }

  /** Returns false on a malformed stream (the caller drops the connection). */
  push(chunk: Buffer, onFrame: (frame: Buffer) => void): boolean {
    this.#chunks.push(chunk);
    this.#have += chunk.length;
    for (;;) {
      if (this.#have < 4) return true;
      const head = this.#chunks[0] as Buffer;
      const first = head.length >= 4 ? head : Buffer.concat(this.#chunks);
      if (first !== head) this.#chunks = [first];
      const len = first.readUInt32LE(0);
      if (len < this.#min || len > this.#max) return false;
      if (this.#have < len) return true;
      const all = this.#chunks.length === 1 ? first : Buffer.concat(this.#chunks, this.#have);
      onFrame(all.subarray(0, len));
      const rest = all.subarray(len);
      this.#chunks = rest.length ? [rest] : [];
      this.#have = rest.length;
    }
  }
}

/** Accepts link connections and answers each operation with the device's responder. */
export class LinkServer {
  readonly #server: Server;
  readonly #native: SoftNativeDevice;
  readonly #maxMessage: number;
  readonly #sockets = new Set<Socket>();
  // Per (target QP, source QP): the last WR run and its answer, to answer resends.
  readonly #last = new Map<string, { token: number; answer: Buffer }>();

  private constructor(server: Server, native: SoftNativeDevice, maxMessage: number) {
    this.#server = server;
    this.#native = native;
    this.#maxMessage = maxMessage;
  }

  static async listen(
    native: SoftNativeDevice,
    host: string,
    port: number,
    maxMessage: number,
  ): Promise<{ server: LinkServer; address: LinkAddress }> {
    const server = createServer();
    const link = new LinkServer(server, native, maxMessage);
    server.on('connection', (s) => link.#serve(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', () => undefined); // e.g. EMFILE on accept: keep serving the others
    server.unref();
    const a = server.address();
    return { server: link, address: { host, port: typeof a === 'object' && a ? a.port : port } };
  }

  #serve(sock: Socket): void {
    sock.setNoDelay(true);
    sock.unref();
    this.#sockets.add(sock);
    const reader = new FrameReader(REQ_HEADER, REQ_HEADER + this.#maxMessage);
    sock.on('data', (chunk: Buffer) => {
      // A garbled or hostile stream drops the connection; nothing throws out of here.
      let ok = true;
      try {
        ok = reader.push(chunk, (f) => this.#answer(sock, f));
      } catch {
        ok = false;
      }
      if (!ok) sock.destroy();
    });
    sock.on('error', () => sock.destroy());
    sock.on('close', () => this.#sockets.delete(sock));
  }

  #answer(sock: Socket, f: Buffer): void {
    const reqId = f.readUInt32LE(4);
    const opcode = f.readUInt8(8);
    const length = f.readUInt32LE(28);
    if (opcode === OP_READ ? length > this.#maxMessage : f.length !== REQ_HEADER + length) {
      throw new RangeError('malformed link frame');
    }
    const slot = f.readUInt32LE(32);
    const gen = f.readUInt32LE(36);
    const srcQpn = f.readUInt32LE(40);
    const srcPid = f.readUInt32LE(44);
    const token = f.readUInt32LE(48);
    const key = `${slot}:${gen}:${srcPid}:${srcQpn}`;
    const last = this.#last.get(key);
    if (last && token === last.token) {
      // A resend of a WR already run: the same answer again, not a second execution.
      const again = Buffer.from(last.answer);
      again.writeUInt32LE(reqId, 4);
      sock.write(again);
      return;
    }
    if (last && token < last.token) return; // older than what was run: a stale duplicate
    const payload = opcode === OP_READ ? new Uint8Array(length) : f.subarray(REQ_HEADER);
    const r = this.#native.respond(
      slot,
      gen,
      opcode,
      payload,
      f.readUInt32LE(12),
      f.readDoubleLE(16),
      f.readUInt32LE(24),
      srcQpn,
      srcPid,
    );
    const outcome = (r >> 8) & 0xff;
    const status = r & 0xff;
    const data = opcode === OP_READ && outcome === 0 && status === 0 ? payload : undefined;
    const answer = Buffer.alloc(RES_HEADER + (data?.length ?? 0));
    answer.writeUInt32LE(answer.length, 0);
    answer.writeUInt32LE(reqId, 4);
    answer.writeUInt8(outcome, 8);
    answer.writeUInt8(status, 9);
    answer.writeUInt16LE((r >>> 16) & 0xffff, 10);
    if (data) answer.set(data, RES_HEADER);
    // Only a WR that ran is remembered; RNR and transport answers are run again on resend.
    if (outcome === 0) this.#last.set(key, { token, answer });
    sock.write(answer);
  }

  close(): void {
    for (const s of this.#sockets) s.destroy();
    this.#server.close();
  }
}

/** One connection to a peer device's LinkServer, shared by this device's QPs. */
export class LinkClient {
  readonly #sock: Socket;
  readonly #pending = new Map<number, LinkReply>();
  #nextId = 1;
  #dead = false;

  constructor(address: LinkAddress, maxMessage: number) {
    this.#sock = connect({ host: address.host, port: address.port, noDelay: true });
    this.#sock.unref();
    const reader = new FrameReader(RES_HEADER, RES_HEADER + maxMessage);
    this.#sock.on('data', (chunk: Buffer) => {
      const ok = reader.push(chunk, (f) => {
        const reply = this.#pending.get(f.readUInt32LE(4));
        if (!reply) return;
        this.#pending.delete(f.readUInt32LE(4));
        const data =
          f.length > RES_HEADER
            ? new Uint8Array(f.buffer, f.byteOffset + RES_HEADER, f.length - RES_HEADER)
            : undefined;
        reply(f.readUInt8(8), f.readUInt8(9), f.readUInt16LE(10), data);
      });
      if (!ok) this.#sock.destroy(); // 'close' then fails what is pending
    });
    const fail = () => {
      this.#dead = true;
      const waiting = [...this.#pending.values()];
      this.#pending.clear();
      for (const reply of waiting) reply(OUTCOME_TRANSPORT, 0, 12);
    };
    this.#sock.on('error', fail);
    this.#sock.on('close', fail);
  }

  get dead(): boolean {
    return this.#dead;
  }

  /** Sends the WR described by `hdr` (see Device::linkTake); `reply` gets the answer. */
  send(hdr: Float64Array, payload: Uint8Array | undefined, reply: LinkReply): void {
    if (this.#dead) {
      setImmediate(() => reply(OUTCOME_TRANSPORT, 0, 12));
      return;
    }
    const id = this.#nextId++;
    const len = payload?.length ?? 0;
    const h = Buffer.alloc(REQ_HEADER);
    h.writeUInt32LE(REQ_HEADER + len, 0);
    h.writeUInt32LE(id, 4);
    h.writeUInt8(hdr[ABI.LINK_OPCODE] as number, 8);
    h.writeUInt32LE(hdr[ABI.LINK_IMM] as number, 12);
    h.writeDoubleLE(hdr[ABI.LINK_REMOTE_ADDR] as number, 16);
    h.writeUInt32LE(hdr[ABI.LINK_RKEY] as number, 24);
    h.writeUInt32LE(hdr[ABI.LINK_LENGTH] as number, 28);
    h.writeUInt32LE(hdr[ABI.LINK_DST_SLOT] as number, 32);
    h.writeUInt32LE(hdr[ABI.LINK_DST_GEN] as number, 36);
    h.writeUInt32LE(hdr[ABI.LINK_SRC_QPN] as number, 40);
    h.writeUInt32LE(hdr[ABI.LINK_SRC_PID] as number, 44);
    h.writeUInt32LE(hdr[ABI.LINK_TOKEN] as number, 48);
    this.#pending.set(id, reply);
    this.#sock.write(h);
    // Copied: a frame that timed out may still sit in the socket's queue when the QP's
    // payload buffer is filled for the next WR.
    if (len) this.#sock.write(Buffer.from(payload as Uint8Array));
  }

  close(): void {
    this.#sock.destroy();
  }
}
