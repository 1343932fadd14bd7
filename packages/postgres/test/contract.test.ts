import { PostgresLockService } from '@dlock/postgres';
import { type ContractSubject, electionContract, lockServiceContract } from '@dlock/testing/contract';
import { afterAll, beforeAll } from 'vitest';
import { newPool, privateSchema } from './helpers.js';

const pool = newPool(20);
let schema = '';
let drop: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ schema, drop } = await privateSchema(pool));
});
afterAll(async () => {
  await drop();
  await pool.end();
});

const subject = (): ContractSubject => {
  const service = new PostgresLockService({ pool, schema });
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
    const service = new PostgresLockService({ pool, schema, preparedStatements: true });
    return { service, close: () => service.close() };
  },
  { ttlMs: 500, expirySlackMs: 100, fifo: true, closeService },
);
