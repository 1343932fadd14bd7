import {
  assertIdentifier,
  type PostgresFencingStatements,
  postgresFencingStatements,
  rejectUnknownKeys,
} from '@dlock/fencing-common';

/** Where the high-water marks live. */
export interface FencingTableOptions {
  /** Table name; default `dlock_fencing`. Must match `[A-Za-z_][A-Za-z0-9_]{0,62}`; always quoted. */
  readonly table?: string;
  /** Schema name; default: none, so the connection's `search_path` decides. Not created by `ensureSchema`. */
  readonly schema?: string;
}

const TABLE_OPTION_KEYS: readonly string[] = ['table', 'schema'];

/** Default table name for both gates. */
export const DEFAULT_FENCING_TABLE = 'dlock_fencing';

/**
 * The SQL the gate runs, for teams that run their own migrations or audit what touches their database:
 * `createTable` (idempotent DDL), `dropTable`, `guard` (the guarded upsert; `$1` resource, `$2` token as a
 * decimal string; one row back means accepted, zero rows stale) and `highWaterMark` (reads the mark as text).
 */
export type FencingSql = PostgresFencingStatements;

/**
 * Builds the SQL for a table location. Throws `InvalidArgumentError` for a bad name or a key other than
 * `table` and `schema`.
 *
 * @example
 * ```ts
 * // In a migration file of your own tool:
 * await client.query(fencingSql({ schema: 'app' }).createTable);
 * ```
 */
export function fencingSql(options: FencingTableOptions = {}): FencingSql {
  rejectUnknownKeys(options, 'options', TABLE_OPTION_KEYS);
  // `undefined` alone means "the default": a `null` table is a mistake, not a request for dlock_fencing.
  const table =
    options.table === undefined ? DEFAULT_FENCING_TABLE : assertIdentifier(options.table, 'options.table');
  const schema =
    options.schema === undefined ? undefined : assertIdentifier(options.schema, 'options.schema');
  return postgresFencingStatements(table, schema);
}
