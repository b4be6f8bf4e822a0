import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@rdmajs/source'] },
  ssr: { resolve: { conditions: ['@rdmajs/source'] } },
  test: {
    name: 'tcp',
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    // Hooks fork contract peers, whose start is bounded by spawnContractPeer's own 30 s
    // deadline: vitest's 10 s default failed a loaded run's beforeAll before that deadline.
    hookTimeout: 120_000,
  },
});
