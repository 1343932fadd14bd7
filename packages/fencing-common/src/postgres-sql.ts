import { InvalidArgumentError } from './errors.js';
import { errorProperty, type RetryableKind } from './gate-driver.js';
import { parseLockTimeoutMs } from './transaction-settings.js';
import { assertIdentifier } from './validate.js';

/**
 * The PostgreSQL statements, shared by `@dlock/fencing-pg` and `@dlock/fencing-kysely` (PostgreSQL and PGlite) so
 * the two gates cannot drift apart. Parameters: `$1` resource, `$2` token as a decimal string.
 */
export interface PostgresFencingStatements {
  /** Creates the fence table (`resource` text key, `last_token` bigint) unless it exists. No parameters. */
  readonly createTable: string;
  /** Drops the fence table if it exists, and with it every mark. No parameters. */
  readonly dropTable: string;
  /**
   * One row back: accepted, and the row is locked. Zero rows: stale, and the row is locked too. The row carries
   * `txid`, the id of the transaction that passed the gate, as text: a gate that owns the transaction compares it
   * with the id just before COMMIT to notice a callback that committed and began another transaction.
   */
  readonly guard: string;
  /** Reads the mark as text, because node-postgres returns int8 as a string and Number() would lose digits. */
  readonly highWaterMark: string;
}

/** Double-quotes an identifier for PostgreSQL and SQLite. Callers validate it first; quoting is the second wall. */
export function quoteIdentifier(identifier: string): string {
  if (typeof identifier !== 'string') throw new InvalidArgumentError('identifier', 'must be a string');
  return `"${identifier.replaceAll('"', '""')}"`;
}

/** Builds the statements for a table; `schema` and `table` must already be validated identifiers. */
export function postgresFencingStatements(
  table: string,
  schema: string | undefined,
): PostgresFencingStatements {
  assertIdentifier(table, 'table');
  if (schema !== undefined) assertIdentifier(schema, 'schema');
  const name =
    schema === undefined ? quoteIdentifier(table) : `${quoteIdentifier(schema)}.${quoteIdentifier(table)}`;
  return Object.freeze({
    createTable: `CREATE TABLE IF NOT EXISTS ${name} (
  resource   text   PRIMARY KEY CHECK (octet_length(resource) BETWEEN 1 AND 1024),
  last_token bigint NOT NULL CHECK (last_token > 0)
)`,
    dropTable: `DROP TABLE IF EXISTS ${name}`,
    // ON CONFLICT makes "insert the first mark" and "raise an existing mark" one atomic step: two first writers
    // cannot both insert, the loser waits for the winner's row and then evaluates the WHERE against the newest
    // committed mark. The conflicting row is locked even when the WHERE fails, so it stays locked until COMMIT
    // or ROLLBACK and writers of one resource are serialised behind the gate.
    guard: `INSERT INTO ${name} AS f (resource, last_token) VALUES ($1, $2::bigint)
ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token
WHERE f.last_token <= EXCLUDED.last_token
RETURNING txid_current()::text AS txid`,
    highWaterMark: `SELECT last_token::text AS last_token FROM ${name} WHERE resource = $1`,
  });
}

/**
 * Bounds every lock wait for the rest of the transaction. `ms` must already be a checked integer
 * (`parseLockTimeoutMs`): `SET` takes no bind parameters, so the value is part of the text.
 */
export function postgresLockTimeout(ms: number): string {
  if (ms === undefined) throw new InvalidArgumentError('ms', 'must be an integer in 1..2147483647');
  return `SET LOCAL lock_timeout = ${parseLockTimeoutMs(ms, 'ms')}`;
}

/**
 * Which SQLSTATEs a retry of the whole transaction can cure: 40001 serialization failure and 40P01 deadlock abort
 * the transaction (`'conflict'`); 55P03 is a `lock_timeout` that ran out (`'busy'`).
 */
export function classifyPostgresError(error: unknown): RetryableKind {
  const code = errorProperty(error, 'code');
  if (code === '40001' || code === '40P01') return 'conflict';
  if (code === '55P03') return 'busy';
  return undefined;
}

const MAX_CREATE_ATTEMPTS = 100;

/**
 * Runs an idempotent `CREATE TABLE IF NOT EXISTS` on PostgreSQL, where two concurrent ones can both pass the
 * existence check and then collide in the catalog (23505 on pg_type's index, 42P07 duplicate table, 42710
 * duplicate type). The other creator won, so another attempt finds the table; each round has a winner, so a few
 * attempts cover any number of racers. The bound matters when the name is taken by something that is not the table
 * (another type of that name fails with 42710 on every attempt, with no delay between them): more attempts than
 * `MAX_CREATE_ATTEMPTS` cannot help anyone and would only spin.
 */
export async function createTableRacingOthers(create: () => Promise<unknown>, attempts = 5): Promise<void> {
  if (typeof create !== 'function') throw new InvalidArgumentError('create', 'must be a function');
  if (!Number.isSafeInteger(attempts) || attempts < 1 || attempts > MAX_CREATE_ATTEMPTS) {
    throw new InvalidArgumentError('attempts', `must be an integer in 1..${MAX_CREATE_ATTEMPTS}`);
  }
  for (let attempt = 1; ; attempt++) {
    try {
      await create();
      return;
    } catch (error) {
      const code =
        typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
      const lostRace = code === '23505' || code === '42P07' || code === '42710';
      if (!lostRace || attempt >= attempts) throw error;
    }
  }
}
