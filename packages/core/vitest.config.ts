import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// @dlock/testing depends on @dlock/core, so core's own tests reach the test kit by source path rather than
// through a package dependency (which would make the workspace graph cyclic). Both names resolve to source so
// that classes such as TransportError are the same objects on both sides. @dlock/test-utils depends on no dlock
// package, so a dependency would be acyclic; it goes by source path too so that core keeps no workspace
// dependency and needs nothing built before its own tests.
export default defineConfig({
  resolve: {
    // Exact matches, the subpath first: a prefix alias for '@dlock/core' would swallow '@dlock/core/adapter'.
    alias: [
      {
        find: /^@dlock\/core\/adapter$/,
        replacement: fileURLToPath(new URL('./src/adapter/index.ts', import.meta.url)),
      },
      { find: /^@dlock\/core$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
      {
        find: /^@dlock\/testing$/,
        replacement: fileURLToPath(new URL('../testing/src/index.ts', import.meta.url)),
      },
      {
        find: /^@dlock\/test-utils$/,
        replacement: fileURLToPath(new URL('../test-utils/src/index.ts', import.meta.url)),
      },
    ],
  },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
  },
});
