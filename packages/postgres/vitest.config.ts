import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    // Lease timing shares two cores with other suites: one file at a time keeps it honest.
    fileParallelism: false,
  },
});
