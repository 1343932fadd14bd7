import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    // Lease timing and fault injection share two cores with other suites: one file at a time keeps them honest.
    fileParallelism: false,
  },
});
