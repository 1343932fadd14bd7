/**
 * @dlock/postgres through @dlock/core's LockClient, as an application would use it: the queue in the waiters table
 * with a notice to the next waiter, renewal by core's scheduler in one statement per batch. Two rows: the default
 * (unnamed statements, which any transaction-pooling proxy passes) and `preparedStatements: true`.
 */
import { lockClientSubject, packageVersion } from '../lib/index.mjs';
import { countingPool, dropSchema } from './client.mjs';

export function dlockSubject({ preparedStatements }) {
  const schema = `dlock_bench_dlock${preparedStatements ? '_prepared' : ''}`;
  let db;
  const subject = lockClientSubject({
    adapter: '@dlock/postgres',
    name: `@dlock/postgres (${preparedStatements ? 'prepared statements' : 'default'})`,
    config: `pg ${packageVersion('pg')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults; PostgresLockService { preparedStatements: ${preparedStatements} } on a pool of 10 (one of them listens while someone waits)`,
    // Every statement the pool carries (the service's, its LISTEN and checks); rows its renewals updated.
    countRequests: async () => db.counts.statements,
    countCommands: async () => db.counts.rowsUpdated,
    async connect({ PostgresLockService }) {
      db = countingPool(10);
      const service = new PostgresLockService({ pool: db.wrapped, schema, preparedStatements });
      await service.ensureSchema();
      return service;
    },
    disconnect: async () => {
      await db?.pool.end().catch(() => {});
      await dropSchema(schema).catch(() => {});
    },
  });
  return subject;
}
