import { MemoryLockService } from '@dlock/core';
import { semaphoreContract } from '../src/contract/index.js';
import { FaultyLockService } from '../src/index.js';

const memory = new MemoryLockService();
semaphoreContract('MemoryLockService', () => ({ service: memory }), { ttlMs: 500, expirySlackMs: 100 });
// Through the fault wrapper, healthy: it forwards every permit call.
semaphoreContract('FaultyLockService over memory', () => ({ service: new FaultyLockService(memory) }), {
  ttlMs: 500,
  expirySlackMs: 100,
});
