import {
  assertIdentifier,
  type Fence,
  type FenceCall,
  InvalidArgumentError,
  type IsolationLevel,
  parseFence,
  parseIsolationLevel,
  parseLockTimeoutMs,
  rejectUnknownKeys,
} from '@dlock/fencing-common';
import { type Kysely, MysqlAdapter, PostgresAdapter, SqliteAdapter } from 'kysely';
import type { FencingDialect, FencingDialectName } from './dialect/dialect.js';
import { mysqlDialect } from './dialect/mysql.js';
import { postgresDialect } from './dialect/postgres.js';
import { sqliteDialect } from './dialect/sqlite.js';
import type { Gate } from './kysely-driver.js';

/** Default table name, shared with `@dlock/fencing-pg`. */
export const DEFAULT_FENCING_TABLE = 'dlock_fencing';

const DIALECTS: Readonly<Record<FencingDialectName, FencingDialect>> = Object.freeze({
  postgres: postgresDialect,
  mysql: mysqlDialect,
  sqlite: sqliteDialect,
});

/** Where the marks live, and which SQL to speak. */
export interface FencingTableOptions {
  /** Table name; default `dlock_fencing`. Must match `[A-Za-z_][A-Za-z0-9_]{0,62}`; always quoted. */
  readonly table?: string;
  /** Schema (PostgreSQL), database (MySQL) or attached database (SQLite) holding the table. Not created. */
  readonly schema?: string;
  /**
   * Which SQL to speak. Default: detected from the Kysely instance's adapter (PostgreSQL, PGlite, MySQL,
   * MariaDB, SQLite and third-party dialects built on those adapters). Set it when detection fails, e.g. with a
   * second installed copy of kysely.
   */
  readonly dialect?: FencingDialectName;
}

/** Isolation levels `runFenced` can open its transaction with. */
export type FencedIsolationLevel = IsolationLevel;

/** Options of `runFenced` (and of the deprecated `fenced`). */
export interface FencedOptions extends FencingTableOptions {
  /**
   * Only when the gate opens the transaction. PostgreSQL and MySQL: any of the three (default: the server's);
   * under `'repeatable read'` and `'serializable'` concurrent writers can abort with `FenceConflictError`.
   * SQLite is always serializable and accepts only `'serializable'` here.
   */
  readonly isolationLevel?: FencedIsolationLevel;
  /**
   * PostgreSQL only: bound, in ms, on lock waits for the rest of the transaction (`SET LOCAL lock_timeout`, one
   * extra statement). The gate's own wait running out throws `FenceBusyError`. On MySQL the bound is
   * `innodb_lock_wait_timeout`; on SQLite the driver's busy timeout.
   */
  readonly lockTimeoutMs?: number;
}

/** Options of `checkFence`: the transaction is yours, so its isolation level is too. */
export type CheckFenceOptions = Omit<FencedOptions, 'isolationLevel'>;

/**
 * Every key a call of this package reads. Each call accepts all of them, so one {@link FencedOptions} object can be
 * shared by `runFenced`, `checkFence`, `highWaterMark`, `ensureFencingTable`, `fencingMigration` and `fencingSql`
 * (TypeScript lets it through where the narrower type is declared); the keys a call has no use for change nothing
 * there. Any other key is a typo and is refused.
 */
export const FENCING_OPTION_KEYS: readonly string[] = Object.freeze([
  'table',
  'schema',
  'dialect',
  'isolationLevel',
  'lockTimeoutMs',
]);

// SQL text per (dialect, schema, table), built once: the gate is on the write hot path.
const gates = new Map<string, Gate>();

/** Refuses an unknown option key, then checks the resource and the token: the first checks of every gate call. */
export function parseFenceInput(options: unknown, resource: unknown, token: unknown): Fence {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  return parseFence(resource, token);
}

/** Resolves table and dialect, and checks the transaction settings against what the dialect can do. */
export function resolveCall<DB>(
  db: Kysely<DB>,
  fence: Fence,
  options: FencedOptions,
): { gate: Gate; call: FenceCall } {
  const gate = resolveGate(db, options);
  const { dialect } = gate;
  if (options.lockTimeoutMs !== undefined && dialect.lockTimeout === undefined) {
    throw new InvalidArgumentError(
      'options.lockTimeoutMs',
      `is supported on postgres only, not ${dialect.name}`,
    );
  }
  const lockTimeoutMs = parseLockTimeoutMs(options.lockTimeoutMs);
  const isolationLevel = parseIsolationLevel(options.isolationLevel);
  if (dialect.name === 'sqlite' && isolationLevel !== undefined && isolationLevel !== 'serializable') {
    throw new InvalidArgumentError(
      'options.isolationLevel',
      'must be serializable on SQLite (it has no other)',
    );
  }
  // Spelt out: an object spread here costs microseconds per call (measured), which SQLite's writes would feel.
  const call: FenceCall = { resource: fence.resource, token: fence.token, isolationLevel, lockTimeoutMs };
  return { gate, call };
}

export function resolveGate<DB>(db: Kysely<DB>, options: FencingTableOptions): Gate {
  const { table, schema } = tableLocation(options);
  // Only `undefined` asks for detection: a `null` dialect is a mistake, not a request to guess.
  const dialect =
    options.dialect === undefined
      ? dialectNamed(detectDialect(db), 'options.dialect')
      : dialectNamed(options.dialect, 'options.dialect');
  const name = dialect.name;
  const key = `${name}\u0000${schema ?? ''}\u0000${table}`;
  let gate = gates.get(key);
  if (gate === undefined) {
    gate = Object.freeze({ dialect, sql: dialect.sql(table, schema) });
    gates.set(key, gate);
  }
  return gate;
}

function dialectNamed(name: FencingDialectName, field: string): FencingDialect {
  // typeof first: indexing with an object would call its toString, which may throw or not exist.
  const dialect = typeof name === 'string' && Object.hasOwn(DIALECTS, name) ? DIALECTS[name] : undefined;
  if (dialect === undefined) {
    throw new InvalidArgumentError(field, `must be one of ${Object.keys(DIALECTS).join(', ')}`);
  }
  return dialect;
}

function tableLocation(options: Omit<FencingTableOptions, 'dialect'>): { table: string; schema?: string } {
  // `undefined` alone means "the default": a `null` table is a mistake, not a request for dlock_fencing.
  const table =
    options.table === undefined ? DEFAULT_FENCING_TABLE : assertIdentifier(options.table, 'options.table');
  return options.schema === undefined
    ? { table }
    : { table, schema: assertIdentifier(options.schema, 'options.schema') };
}

/** The dialect behind a Kysely instance, from its adapter. */
export function detectDialect<DB>(db: Kysely<DB>): FencingDialectName {
  if (typeof (db as { getExecutor?: unknown } | null)?.getExecutor !== 'function') {
    throw new InvalidArgumentError('db', 'must be a Kysely instance (or set options.dialect)');
  }
  // getExecutor() is marked internal in Kysely's docs but is public API in its typings; instanceof works
  // because kysely is a peer dependency, so the user's adapters are built from the classes we import.
  let adapter: unknown;
  try {
    adapter = (db.getExecutor() as { adapter?: unknown } | undefined)?.adapter;
  } catch {
    // A real instance's getExecutor() does not throw; what did is no Kysely instance, whatever it threw.
    throw new InvalidArgumentError('db', 'must be a Kysely instance (its getExecutor() threw)');
  }
  if (adapter instanceof PostgresAdapter) return 'postgres';
  if (adapter instanceof MysqlAdapter) return 'mysql';
  if (adapter instanceof SqliteAdapter) return 'sqlite';
  throw new InvalidArgumentError('db', 'uses a dialect the gate cannot detect; set options.dialect');
}

/**
 * The SQL the gate runs on one dialect, for your own migrations or review. `options` may be a whole
 * {@link FencedOptions} object; its `dialect`, if set, must agree with the `dialect` argument.
 *
 * @example
 * ```ts
 * console.log(fencingSql('mysql').createTable);
 * ```
 */
export function fencingSql(dialect: FencingDialectName, options: Omit<FencingTableOptions, 'dialect'> = {}) {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  const named = dialectNamed(dialect, 'dialect');
  const told = (options as FencingTableOptions).dialect;
  if (told !== undefined && told !== dialect) {
    throw new InvalidArgumentError('options.dialect', `conflicts with the dialect argument "${dialect}"`);
  }
  const { table, schema } = tableLocation(options);
  return named.sql(table, schema);
}

/**
 * Refuses what cannot be a Kysely instance or Transaction before anything is sent: `null`, a pool or a connection
 * string would otherwise fail later as a TypeError from inside the gate. Duck-typed rather than `instanceof`, so an
 * instance from a second installed copy of kysely passes; every Kysely, Transaction and ControlledTransaction has
 * all four members (a Transaction's `transaction()` exists and throws), so asking for all of them refuses only
 * objects the gate would break on, such as one without `transaction()` reaching `runFenced`.
 */
export function assertKysely(db: unknown, field: string): void {
  if (!isKyselyLike(db)) throw new InvalidArgumentError(field, 'must be a Kysely instance or Transaction');
}

/** Has the members of a Kysely instance or Transaction the gate calls; a getter that throws has not. */
export function isKyselyLike(db: unknown): boolean {
  if (typeof db !== 'object' || db === null) return false;
  try {
    const handle = db as Partial<
      Record<'executeQuery' | 'transaction' | 'getExecutor' | 'isTransaction', unknown>
    >;
    return (
      typeof handle.executeQuery === 'function' &&
      typeof handle.transaction === 'function' &&
      typeof handle.getExecutor === 'function' &&
      typeof handle.isTransaction === 'boolean'
    );
  } catch {
    // A Proxy or a getter that throws is no Kysely instance either; its error would hide which argument was wrong.
    return false;
  }
}
