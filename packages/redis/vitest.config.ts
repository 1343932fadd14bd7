import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    // The fault suites pause, kill and restart servers and assert on timings: one file at a time, so that they
    // do not starve each other on a small machine.
    fileParallelism: false,
  },
});
