import { PostgresLockService } from '@dlock/postgres';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
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

semaphoreContract(
  'PostgresLockService (PostgreSQL 15, pg.Pool)',
  () => {
    const service = new PostgresLockService({ pool, schema });
    return { service, close: () => service.close() };
  },
  {
    ttlMs: 1_000,
    expirySlackMs: 200,
    closeService: async (subject: ContractSubject) => {
      await subject.close?.();
    },
  },
);
