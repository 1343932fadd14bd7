import { postgresFencingStatements } from '@dlock/fencing-common';
import { errorProperty, type FencingDialect } from './dialect.js';

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
  verdict: (result) => (result.rows.length === 1 ? 'accepted' : 'read-mark'),
  classify(error) {
    const code = errorProperty(error, 'code');
    if (code === '40001' || code === '40P01') return 'conflict';
    if (code === '55P03') return 'busy';
    return undefined;
  },
};

export const postgresDialect = Object.freeze(dialect);
