import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// @dlock/testing depends on @dlock/core, so core's own tests reach the test kit by source path rather than
// through a package dependency (which would make the workspace graph cyclic). Both names resolve to source so
// that classes such as TransportError are the same objects on both sides. @dlock/test-utils depends on no dlock
// package, so a dependency would be acyclic; it goes by source path too so that core keeps no workspace
// dependency and needs nothing built before its own tests.
export default defineConfig({
  resolve: {
    alias: {
      '@dlock/core': fileURLToPath(new URL('./src/index.ts', import.meta.url)),
      '@dlock/testing': fileURLToPath(new URL('../testing/src/index.ts', import.meta.url)),
      '@dlock/test-utils': fileURLToPath(new URL('../test-utils/src/index.ts', import.meta.url)),
    },
  },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
  },
});
