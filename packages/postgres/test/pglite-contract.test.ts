import { PostgresLockService } from '@dlock/postgres';
import {
  type ContractSubject,
  electionContract,
  lockServiceContract,
  semaphoreContract,
} from '@dlock/testing/contract';
import type { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll } from 'vitest';
import { embedded } from './helpers.js';

// One embedded database for the file (PGlite takes seconds to start on a busy machine); every test uses names of its
// own.
let db: PGlite;
beforeAll(async () => {
  db = await embedded();
}, 120_000);
afterAll(async () => {
  await db.close();
});

const subject = (): ContractSubject => {
  const service = new PostgresLockService({ pool: db });
  return { service, close: () => service.close() };
};
const closeService = async (made: ContractSubject): Promise<void> => {
  await made.close?.();
};

lockServiceContract('PostgresLockService (PGlite)', subject, {
  ttlMs: 500,
  expirySlackMs: 100,
  fifo: true,
  closeService,
});
electionContract('PostgresLockService (PGlite)', subject, { ttlMs: 2_000, fifo: true });
semaphoreContract('PostgresLockService (PGlite)', subject, {
  ttlMs: 1_000,
  expirySlackMs: 200,
  closeService,
});
