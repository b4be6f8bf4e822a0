// The peer side of the contract suite, run in a forked process by each transport's
// fixture script. Channel names choose what the peer does:
//   echo        sends every message back on the same channel, then releases it
//   hold        keeps every message (no release) until the parent sends 'release'
//   reverse:N   opens N channels back (named r0 … r<N-1>) and sends one message on each
// IPC: {id, op: 'stats' | 'release'} → {id, result}; first message: {ready: port}.
import type { Channel, Connection, InboundMessage, Transport } from '../../src/index.js';
import type { ContractTransportOptions } from './ContractTarget.js';

export interface PeerStats {
  connections: number;
  maxReceiveHeldBytes: number;
  receiveHeldBytes: number;
  held: number;
  received: number;
  receivedBytes: number;
  rejects: string[];
  rss: number;
}

export interface PeerArgs {
  secret: string;
  options: ContractTransportOptions;
}

const LONG = 600_000;

export async function runContractPeer(
  makeTransport: (options: ContractTransportOptions) => Transport,
): Promise<void> {
  const args = JSON.parse(process.argv[2] ?? '{}') as PeerArgs;
  const transport = makeTransport(args.options);
  const listener = await transport.listen({ secret: args.secret });
  const connections = new Set<Connection>();
  let held: Array<{ conn: Connection; m: InboundMessage }> = [];
  let holding = true;
  const stats = { received: 0, receivedBytes: 0, rejects: [] as string[], maxHeld: 0 };

  listener.on('reject', (err) => stats.rejects.push((err as { code?: string }).code ?? 'none'));
  listener.on('connection', (conn) => {
    connections.add(conn);
    conn.on('close', () => {
      // What a gone connection held is no longer anyone's.
      for (const h of held) if (h.conn === conn) h.m.release();
      held = held.filter((h) => h.conn !== conn);
      const s = conn.stats();
      stats.maxHeld = Math.max(stats.maxHeld, s.maxReceiveHeldBytes);
      connections.delete(conn);
    });
    conn.on('error', () => {});
    conn.on('channel', (ch) => void serve(conn, ch));
  });

  async function serve(conn: Connection, ch: Channel): Promise<void> {
    try {
      if (ch.name.startsWith('reverse:')) {
        const n = Number(ch.name.slice('reverse:'.length));
        await Promise.all(
          Array.from({ length: n }, async (_, i) => {
            const back = conn.openChannel(`r${i}`);
            await back.send(new TextEncoder().encode(`reply ${i}`));
            await back.close();
          }),
        );
      }
      for (;;) {
        let m: InboundMessage;
        try {
          m = await ch.receive({ timeoutMs: LONG });
        } catch (err) {
          if ((err as { code?: string }).code === 'ERR_MUX_DEADLINE') continue;
          break; // closed by the client, or the connection went away
        }
        stats.received++;
        stats.receivedBytes += m.length;
        if (ch.name === 'echo') {
          try {
            await ch.send(m.bytes, { timeoutMs: LONG });
          } finally {
            m.release();
          }
        } else if (ch.name === 'hold' && holding) {
          held.push({ conn, m });
        } else {
          m.release();
        }
      }
      await ch.close();
    } catch {
      // The connection failed: nothing left to serve.
    }
  }

  process.on('message', (cmd: { id: number; op: string }) => {
    let result: unknown;
    if (cmd.op === 'release') {
      holding = false;
      for (const h of held.splice(0)) h.m.release();
      result = true;
    } else if (cmd.op === 'stats') {
      let maxHeld = stats.maxHeld;
      let heldNow = 0;
      for (const c of connections) {
        const s = c.stats();
        maxHeld = Math.max(maxHeld, s.maxReceiveHeldBytes);
        heldNow += s.receiveHeldBytes;
      }
      const out: PeerStats = {
        connections: connections.size,
        maxReceiveHeldBytes: maxHeld,
        receiveHeldBytes: heldNow,
        held: held.length,
        received: stats.received,
        receivedBytes: stats.receivedBytes,
        rejects: stats.rejects,
        rss: process.memoryUsage().rss,
      };
      result = out;
    }
    process.send?.({ id: cmd.id, result });
  });
  process.send?.({ ready: listener.port });
}
