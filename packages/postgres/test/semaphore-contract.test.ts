import { PostgresLockService } from '@dlock/postgres';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
import { newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(20);
const tables = usePrivateSchema(pool);

semaphoreContract(
  'PostgresLockService (PostgreSQL 15, pg.Pool)',
  () => {
    const service = new PostgresLockService({ pool, schema: tables.name });
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
