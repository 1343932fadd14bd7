import { defineConfig } from 'vitest/config';

// Only for contract-catches-liars.test.ts, which runs this suite in a vitest of its own and reads its report.
export default defineConfig({
  test: { include: ['liars.contract.ts'], testTimeout: 30_000 },
});
