import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@rdmajs/source'] },
  ssr: { resolve: { conditions: ['@rdmajs/source'] } },
  test: {
    name: 'ps-client',
    include: ['test/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
