import { PostgresLockService } from '@dlock/postgres';
import { type ContractSubject, electionContract, lockServiceContract } from '@dlock/testing/contract';
import { newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(20);
const tables = usePrivateSchema(pool);

const subject = (): ContractSubject => {
  const service = new PostgresLockService({ pool, schema: tables.name });
  return { service, close: () => service.close() };
};
const closeService = async (made: ContractSubject): Promise<void> => {
  await made.close?.();
};

lockServiceContract('PostgresLockService (PostgreSQL 15, pg.Pool)', subject, {
  ttlMs: 500,
  expirySlackMs: 100,
  fifo: true,
  closeService,
});

electionContract('PostgresLockService (PostgreSQL 15, pg.Pool)', subject, { ttlMs: 2_000, fifo: true });

lockServiceContract(
  'PostgresLockService (PostgreSQL 15, pg.Pool, prepared statements)',
  () => {
    const service = new PostgresLockService({ pool, schema: tables.name, preparedStatements: true });
    return { service, close: () => service.close() };
  },
  { ttlMs: 500, expirySlackMs: 100, fifo: true, closeService },
);
