// Preloaded (`--import`) into every ps shard the bench starts (PsShardProcess), which has an
// IPC channel to the bench for this alone: it counts the shard's GCs from the start and
// answers `{ op: 'gc', id }` with the totals so far (`{ id, gc }`). The channel is unref'd, so
// it never keeps a shard alive; the shard's own code neither sees nor sends messages.
import { GcTally } from '../stats/GcTally.js';

if (process.send !== undefined) {
  const tally = new GcTally().start();
  process.on('message', (m: { op?: unknown; id?: unknown }) => {
    if (m?.op === 'gc' && typeof m.id === 'number') {
      const id = m.id;
      void tally.settled().then((gc) => process.send?.({ id, gc }));
    }
  });
  process.channel?.unref();
}
