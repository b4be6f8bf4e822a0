// The soft provider's TCP link: carries work requests to a peer on another host (or on
// this one, when chosen for tests). The target's native code runs each operation with
// the same responder logic as the shared-memory path; JS only moves frames.
//
// request  (48 B + payload): len u32, reqId u32, opcode u8, pad×3, imm u32, remoteAddr f64,
//                            rkey u32, length u32, dstSlot u32, dstGen u32, srcQpn u32, srcPid u32
// response (12 B + data):    len u32, reqId u32, outcome u8, status u8, rnrTimer u16, pad u32
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { NativeDevice } from './native.js';

const REQ_HEADER = 48;
const RES_HEADER = 12;
const OP_READ = 4;
const OUTCOME_TRANSPORT = 2;

export interface LinkAddress {
  host: string;
  port: number;
}

export type LinkReply = (
  outcome: number,
  status: number,
  rnrTimer: number,
  data?: Uint8Array,
) => void;

/** Splits a byte stream into length-prefixed frames of `min`..`max` bytes. */
class FrameReader {
  #buf: Buffer = Buffer.alloc(0);
  readonly #min: number;
  readonly #max: number;

  constructor(min: number, max: number) {
    this.#min = min;
    this.#max = max;
  }

  /** Returns false on a malformed stream (the caller drops the connection). */
  push(chunk: Buffer, onFrame: (frame: Buffer) => void): boolean {
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk;
    while (this.#buf.length >= 4) {
      const len = this.#buf.readUInt32LE(0);
      if (len < this.#min || len > this.#max) return false;
      if (this.#buf.length < len) break;
      const frame = this.#buf.subarray(0, len);
      this.#buf = this.#buf.subarray(len);
      onFrame(frame);
    }
    return true;
  }
}

/** Accepts link connections and answers each operation with the device's responder. */
export class LinkServer {
  readonly #server: Server;
  readonly #native: NativeDevice;
  readonly #maxMessage: number;
  readonly #sockets = new Set<Socket>();

  private constructor(server: Server, native: NativeDevice, maxMessage: number) {
    this.#server = server;
    this.#native = native;
    this.#maxMessage = maxMessage;
  }

  static async listen(
    native: NativeDevice,
    host: string,
    port: number,
    maxMessage: number,
  ): Promise<{ server: LinkServer; address: LinkAddress }> {
    const server = createServer();
    const link = new LinkServer(server, native, maxMessage);
    server.on('connection', (s) => link.#serve(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
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
    const payload = opcode === OP_READ ? new Uint8Array(length) : f.subarray(REQ_HEADER);
    const r = this.#native.respond(
      f.readUInt32LE(32),
      f.readUInt32LE(36),
      opcode,
      payload,
      f.readUInt32LE(12),
      f.readDoubleLE(16),
      f.readUInt32LE(24),
      f.readUInt32LE(40),
      f.readUInt32LE(44),
    );
    const outcome = (r >> 8) & 0xff;
    const status = r & 0xff;
    const data = opcode === OP_READ && outcome === 0 && status === 0 ? payload : undefined;
    const res = Buffer.alloc(RES_HEADER);
    res.writeUInt32LE(RES_HEADER + (data?.length ?? 0), 0);
    res.writeUInt32LE(reqId, 4);
    res.writeUInt8(outcome, 8);
    res.writeUInt8(status, 9);
    res.writeUInt16LE((r >>> 16) & 0xffff, 10);
    sock.write(res);
    if (data) sock.write(data);
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
    h.writeUInt8(hdr[0] as number, 8);
    h.writeUInt32LE(hdr[1] as number, 12);
    h.writeDoubleLE(hdr[2] as number, 16);
    h.writeUInt32LE(hdr[3] as number, 24);
    h.writeUInt32LE(hdr[4] as number, 28);
    h.writeUInt32LE(hdr[5] as number, 32);
    h.writeUInt32LE(hdr[6] as number, 36);
    h.writeUInt32LE(hdr[7] as number, 40);
    h.writeUInt32LE(hdr[8] as number, 44);
    this.#pending.set(id, reply);
    this.#sock.write(h);
    // The payload buffer is reused only after the answer, so it can go out uncopied.
    if (len) this.#sock.write(payload as Uint8Array);
  }

  close(): void {
    this.#sock.destroy();
  }
}
