import { errorProperty, quoteIdentifier as quote } from '@dlock/fencing-common';
import type { FencingDialect } from './dialect.js';

/**
 * SQLite 3.35+ (RETURNING; tested with better-sqlite3 12, SQLite 3.51). SQLite has one writer per database
 * file, so the guard's job is to be a write that takes that lock at the start of the transaction.
 */
const dialect: FencingDialect = {
  name: 'sqlite',
  sql(table: string, schema: string | undefined) {
    const name = schema === undefined ? quote(table) : `${quote(schema)}.${quote(table)}`;
    return Object.freeze({
      createTable: `CREATE TABLE IF NOT EXISTS ${name} (
  resource   TEXT    NOT NULL PRIMARY KEY CHECK (length(CAST(resource AS BLOB)) BETWEEN 1 AND 1024),
  last_token INTEGER NOT NULL CHECK (last_token > 0)
)`,
      dropTable: `DROP TABLE IF EXISTS ${name}`,
      // In DO UPDATE, bare column names are the existing row. A failed WHERE modifies nothing and RETURNING
      // then yields no row. Being a write, the statement takes the database's write lock before it reads.
      guard: `INSERT INTO ${name} (resource, last_token) VALUES (?, CAST(? AS INTEGER))
ON CONFLICT (resource) DO UPDATE SET last_token = excluded.last_token
WHERE last_token <= excluded.last_token
RETURNING 1 AS accepted`,
      guardParameters: Object.freeze(['resource', 'token'] as const),
      highWaterMark: `SELECT CAST(last_token AS TEXT) AS last_token FROM ${name} WHERE resource = ?`,
      lockedHighWaterMark: `SELECT CAST(last_token AS TEXT) AS last_token FROM ${name} WHERE resource = ?`,
    });
  },
  guardColumn: 'accepted',
  verdict: (result) => (result.rows.length === 1 ? 'accepted' : 'read-mark'),
  // Another connection can write between a callback's COMMIT and its BEGIN, so SQLite needs the check too. It has
  // no transaction id; a savepoint stands in, as on MySQL. After a bare COMMIT no transaction is open and Kysely's
  // ROLLBACK would fail with its own error, hiding the gate's: `reopen` gives it one to end.
  sameTransaction: {
    kind: 'savepoint',
    set: 'SAVEPOINT dlock_fence',
    release: 'RELEASE SAVEPOINT dlock_fence',
    isMissing: (error) => error instanceof Error && /no such savepoint/i.test(error.message),
    reopen: 'BEGIN',
  },
  classify(error) {
    const code = errorProperty(error, 'code');
    if (typeof code !== 'string') return undefined;
    // BUSY_SNAPSHOT: a WAL reader tried to write after another connection committed; only a new transaction
    // can succeed. Plain BUSY/LOCKED: another connection kept the lock past the busy timeout.
    if (code === 'SQLITE_BUSY_SNAPSHOT') return 'conflict';
    if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return 'busy';
    return undefined;
  },
};

export const sqliteDialect = Object.freeze(dialect);
