import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Blocks and the browser share the local servers and 2 cores: one file at a time.
    fileParallelism: false,
    // Code blocks of different files run three at a time: most of a block's time is node starting and round trips.
    maxConcurrency: 3,
    testTimeout: 60_000,
    hookTimeout: 180_000,
  },
});
