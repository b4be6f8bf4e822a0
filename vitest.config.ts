import { defineConfig } from 'vitest/config';

// One vitest project per package; each resolves workspace packages from source.
export default defineConfig({
  test: {
    projects: ['packages/*', 'apps/*'],
  },
});
