import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@rdmajs/source'] },
  ssr: { resolve: { conditions: ['@rdmajs/source'] } },
  test: {
    name: 'ps-service',
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
  },
});
