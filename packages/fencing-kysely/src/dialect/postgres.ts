import { classifyPostgresError, postgresFencingStatements, postgresLockTimeout } from '@dlock/fencing-common';
import type { FencingDialect } from './dialect.js';

/** PostgreSQL 9.5+ (tested on 15) and PGlite: the same statements as `@dlock/fencing-pg`. */
const dialect: FencingDialect = {
  name: 'postgres',
  sql(table: string, schema: string | undefined) {
    const statements = postgresFencingStatements(table, schema);
    return Object.freeze({
      ...statements,
      guardParameters: Object.freeze(['resource', 'token'] as const),
      // The row is locked by this transaction; under REPEATABLE READ/SERIALIZABLE a version newer than the
      // snapshot would already have failed the guard with 40001, so a plain read sees the locked version.
      lockedHighWaterMark: statements.highWaterMark,
    });
  },
  guardColumn: 'txid',
  verdict: (result) => (result.rows.length === 1 ? 'accepted' : 'read-mark'),
  classify: classifyPostgresError,
  lockTimeout: postgresLockTimeout,
  // The guard's RETURNING already carries the id, so on the happy path this costs one statement, not two.
  sameTransaction: { kind: 'transaction-id', statement: 'SELECT txid_current()::text AS txid' },
};

export const postgresDialect = Object.freeze(dialect);
