import { MemoryLockService } from '@dlock/core';
import { electionContract } from '../src/contract/index.js';

const memory = new MemoryLockService();
electionContract('MemoryLockService', () => ({ service: memory }), { ttlMs: 1_000 });
