import { MemoryLockService } from '@dlock/core';
import { inspectContract } from '../src/contract/index.js';
import { FaultyLockService } from '../src/index.js';

const memory = new MemoryLockService();
// The in-memory service does not queue for locks (core's wait loop retries), so it has no lock waiters to count.
inspectContract('MemoryLockService', () => ({ service: memory }), { ttlMs: 1_000 });
inspectContract('FaultyLockService over memory', () => ({ service: new FaultyLockService(memory) }), {
  ttlMs: 1_000,
});
