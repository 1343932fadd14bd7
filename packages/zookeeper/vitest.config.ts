import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    // Fault tests pause servers and time session expiry: one file at a time keeps them honest on two cores.
    fileParallelism: false,
  },
});
