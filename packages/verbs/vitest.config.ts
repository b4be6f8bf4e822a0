import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@rdmajs/source'] },
  ssr: { resolve: { conditions: ['@rdmajs/source'] } },
  test: {
    name: 'verbs',
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    pool: 'forks',
  },
});
