import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    // Each case drives real redis-server processes (and redis-cli), slow to start on a busy two-core machine.
    testTimeout: 20_000,
  },
});
