import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    // PGlite's start-up in a beforeAll hook took 9–18 s on a loaded 2-core machine, past the 10 s default.
    hookTimeout: 60_000,
  },
});
