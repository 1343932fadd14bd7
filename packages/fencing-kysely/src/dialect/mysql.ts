import { errorProperty } from '@dlock/fencing-common';
import type { FencingDialect } from './dialect.js';

const quote = (identifier: string) => `\`${identifier.replaceAll('`', '``')}\``;

/**
 * MySQL 5.7+/8.x and MariaDB 10.3+ (tested on MariaDB 10.11), InnoDB.
 *
 * There is no `ON CONFLICT … WHERE` here, so the guard is an `INSERT … ON DUPLICATE KEY UPDATE` that can only
 * raise the mark, plus a `write_count` column whose only job is to make every accepted update change the row:
 * then the affected-rows count tells the cases apart in the same round trip. See the README for the proof.
 */
const dialect: FencingDialect = {
  name: 'mysql',
  sql(table: string, schema: string | undefined) {
    const name = schema === undefined ? quote(table) : `${quote(schema)}.${quote(table)}`;
    return Object.freeze({
      // VARBINARY compares bytes exactly: no case folding and no PAD SPACE, so 'a' and 'a ' are two resources,
      // as on PostgreSQL and SQLite. 1024 bytes stays under InnoDB's 3072-byte key limit.
      createTable: `CREATE TABLE IF NOT EXISTS ${name} (
  resource    VARBINARY(1024) NOT NULL,
  last_token  BIGINT NOT NULL,
  write_count BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (resource),
  CHECK (last_token > 0)
) ENGINE=InnoDB`,
      dropTable: `DROP TABLE IF EXISTS ${name}`,
      // Bare column names in ON DUPLICATE KEY UPDATE are the existing row's values, read under an exclusive
      // lock on its newest version (not the snapshot). write_count is assigned first, so it sees the old
      // last_token in both MySQL's left-to-right mode and MariaDB's SIMULTANEOUS_ASSIGNMENT; GREATEST never
      // lowers the mark. No VALUES() (deprecated in MySQL 8.0.20) and no row alias (absent from MariaDB).
      guard: `INSERT INTO ${name} (resource, last_token, write_count) VALUES (?, CAST(? AS SIGNED), 1)
ON DUPLICATE KEY UPDATE
  write_count = write_count + (last_token <= CAST(? AS SIGNED)),
  last_token = GREATEST(last_token, CAST(? AS SIGNED))`,
      guardParameters: Object.freeze(['resource', 'token', 'token', 'token'] as const),
      highWaterMark: `SELECT CAST(last_token AS CHAR) AS last_token FROM ${name} WHERE resource = ?`,
      // A plain SELECT under REPEATABLE READ would read the transaction's snapshot, which can predate the
      // mark that just beat us. FOR UPDATE reads the newest version; the guard already holds its lock.
      lockedHighWaterMark: `SELECT CAST(last_token AS CHAR) AS last_token FROM ${name} WHERE resource = ? FOR UPDATE`,
    });
  },
  // mysql2 encodes string parameters in the pool's character set: under cp1250 or latin1 every character the set
  // lacks became '?', so two names shared one row, and under utf8 (mb3) an emoji reached another row than through a
  // utf8mb4 pool. Bytes are sent as a hex literal, untouched by any character set, and VARBINARY compares them as
  // they are.
  resourceParameter: (resource) => Buffer.from(resource, 'utf8'),
  // Affected rows: 2 = an existing row changed, which only happens when last_token <= token (write_count
  // moved), so accepted. 1 = inserted (accepted) or, with CLIENT_FOUND_ROWS (mysql2's default), matched but
  // unchanged (stale). 0 = unchanged without CLIENT_FOUND_ROWS (stale). Anything but 2 reads the locked mark.
  verdict: (result) => (result.numAffectedRows === 2n ? 'accepted' : 'read-mark'),
  // MySQL has no transaction id a plain user may read (information_schema.innodb_trx needs PROCESS), so a savepoint
  // stands in: COMMIT, ROLLBACK and every implicit commit (DDL, LOCK TABLES, ...) discard it, and RELEASE then
  // fails with 1305.
  sameTransaction: {
    kind: 'savepoint',
    set: 'SAVEPOINT dlock_fence',
    release: 'RELEASE SAVEPOINT dlock_fence',
    isMissing: (error) => errorProperty(error, 'errno') === 1305,
  },
  classify(error) {
    const errno = errorProperty(error, 'errno');
    // 1213 deadlock (InnoDB rolled the whole transaction back); 1020 MariaDB's "record has changed since last
    // read" under innodb_snapshot_isolation; 1205 lock wait timeout (innodb_lock_wait_timeout).
    if (errno === 1213 || errno === 1020) return 'conflict';
    if (errno === 1205) return 'busy';
    return undefined;
  },
};

export const mysqlDialect = Object.freeze(dialect);
