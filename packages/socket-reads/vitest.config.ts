import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@rdmajs/source'] },
  ssr: { resolve: { conditions: ['@rdmajs/source'] } },
  test: {
    name: 'socket-reads',
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
  },
});
