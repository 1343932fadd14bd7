import {
  assertIdentifier,
  assertResource,
  FenceBusyError,
  FenceConflictError,
  type FencingTokenInput,
  InvalidArgumentError,
  parseFencingToken,
  rejectUnknownKeys,
  StaleFencingTokenError,
} from '@dlock/fencing-common';
import {
  CompiledQuery,
  type Kysely,
  MysqlAdapter,
  PostgresAdapter,
  SqliteAdapter,
  type Transaction,
} from 'kysely';
import type { FencingDialect, FencingDialectName, FencingDialectSql } from './dialect/dialect.js';
import { mysqlDialect } from './dialect/mysql.js';
import { postgresDialect } from './dialect/postgres.js';
import { sqliteDialect } from './dialect/sqlite.js';

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

/** Isolation levels `fenced` can open its transaction with. */
export type FencedIsolationLevel = 'read committed' | 'repeatable read' | 'serializable';

/** Options of {@link fenced}. */
export interface FencedOptions extends FencingTableOptions {
  /**
   * Only when `fenced` opens the transaction. PostgreSQL and MySQL: any of the three (default: the server's);
   * under `'repeatable read'` and `'serializable'` concurrent writers can abort with {@link FenceConflictError}.
   * SQLite is always serializable and accepts only `'serializable'` here.
   */
  readonly isolationLevel?: FencedIsolationLevel;
  /**
   * PostgreSQL only: bound, in ms, on lock waits for the rest of the transaction (`SET LOCAL lock_timeout`, one
   * extra statement). The gate's own wait running out throws {@link FenceBusyError}. On MySQL the bound is
   * `innodb_lock_wait_timeout`; on SQLite the driver's busy timeout.
   */
  readonly lockTimeoutMs?: number;
}

/**
 * Every key a call of this package reads. Each call accepts all of them, so one {@link FencedOptions} object can be
 * shared by `fenced`, `highWaterMark`, `ensureFencingTable`, `fencingMigration` and `fencingSql` (TypeScript lets it
 * through where the narrower type is declared); the keys a call has no use for change nothing there. Any other key
 * is a typo and is refused.
 */
export const FENCING_OPTION_KEYS: readonly string[] = Object.freeze([
  'table',
  'schema',
  'dialect',
  'isolationLevel',
  'lockTimeoutMs',
]);

interface Gate {
  readonly dialect: FencingDialect;
  readonly sql: FencingDialectSql;
}

// SQL text per (dialect, schema, table), built once: fenced() is on the write hot path.
const gates = new Map<string, Gate>();

function resolveGate<DB>(db: Kysely<DB>, options: FencingTableOptions): Gate {
  const { table, schema } = tableLocation(options);
  const name = options.dialect ?? detectDialect(db);
  const dialect = dialectNamed(name, 'options.dialect');
  const key = `${name}\u0000${schema ?? ''}\u0000${table}`;
  let gate = gates.get(key);
  if (gate === undefined) {
    gate = Object.freeze({ dialect, sql: dialect.sql(table, schema) });
    gates.set(key, gate);
  }
  return gate;
}

function dialectNamed(name: FencingDialectName, field: string): FencingDialect {
  const dialect = DIALECTS[name];
  if (!Object.hasOwn(DIALECTS, name) || dialect === undefined) {
    throw new InvalidArgumentError(field, `must be one of ${Object.keys(DIALECTS).join(', ')}`);
  }
  return dialect;
}

function tableLocation(options: Omit<FencingTableOptions, 'dialect'>): { table: string; schema?: string } {
  const table = assertIdentifier(options.table ?? DEFAULT_FENCING_TABLE, 'options.table');
  return options.schema === undefined
    ? { table }
    : { table, schema: assertIdentifier(options.schema, 'options.schema') };
}

/** The dialect behind a Kysely instance, from its adapter. */
export function detectDialect<DB>(db: Kysely<DB>): FencingDialectName {
  // getExecutor() is marked internal in Kysely's docs but is public API in its typings; instanceof works
  // because kysely is a peer dependency, so the user's adapters are built from the classes we import.
  const adapter = db.getExecutor().adapter;
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
  const told = (options as FencingTableOptions).dialect;
  if (told !== undefined && told !== dialect) {
    throw new InvalidArgumentError('options.dialect', `conflicts with the dialect argument "${dialect}"`);
  }
  const { table, schema } = tableLocation(options);
  return dialectNamed(dialect, 'dialect').sql(table, schema);
}

function isTransaction<DB>(db: Kysely<DB>): db is Transaction<DB> {
  return db.isTransaction;
}

/**
 * Runs `fn` fenced by `token`: the guard is the first statement of the transaction and shares it with `fn`, so a
 * stale token, a failed mutation or a failed commit leaves both the mark and your data untouched.
 *
 * - Given a `Kysely` instance, it opens the transaction (`db.transaction()`), so the guard and `fn` run on one
 *   connection, and commits when `fn` resolves.
 * - Given a `Transaction` (also a controlled one), it runs the guard in it and then `fn`; you commit or roll back.
 *   Call it before anything else in that transaction, and roll back when it throws.
 *
 * Run every protected query on `trx`, never on the outer `db`, which may hand out another connection.
 *
 * @example
 * ```ts
 * await fenced(db, 'orders/42', lock.fencingToken, (trx) =>
 *   trx.updateTable('orders').set({ status: 'shipped' }).where('id', '=', 42).execute(),
 * );
 * ```
 *
 * @throws {StaleFencingTokenError} `token` is below the stored mark; nothing was written.
 * @throws {FenceConflictError} serialization failure or deadlock; retry the whole call (`withFenceRetry`).
 * @throws {FenceBusyError} the fence row stayed locked past the wait bound.
 * @throws {InvalidArgumentError} bad resource, token or options (an unknown key included), before any SQL.
 */
export async function fenced<DB, T>(
  db: Kysely<DB> | Transaction<DB>,
  resource: string,
  token: FencingTokenInput,
  fn: (trx: Transaction<DB>) => Promise<T>,
  options: FencedOptions = {},
): Promise<T> {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  const fence = { resource: assertResource(resource), token: parseFencingToken(token) };
  if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'must be a function');
  const gate = resolveGate(db, options);
  const lockTimeout = lockTimeoutStatement(gate.dialect, options.lockTimeoutMs);
  const isolation = options.isolationLevel;
  if (isolation !== undefined) validateIsolation(gate.dialect, isolation);

  if (isTransaction(db)) {
    if (isolation !== undefined) {
      throw new InvalidArgumentError(
        'options.isolationLevel',
        'applies only when fenced() opens the transaction',
      );
    }
    try {
      await guard(db, gate, fence, lockTimeout);
    } catch (error) {
      throw mapError(error, gate.dialect, fence.resource, true);
    }
    return fn(db);
  }

  let inGuard = true;
  const builder = isolation === undefined ? db.transaction() : db.transaction().setIsolationLevel(isolation);
  try {
    return await builder.execute(async (trx) => {
      await guard(trx, gate, fence, lockTimeout);
      inGuard = false;
      return fn(trx);
    });
  } catch (error) {
    throw mapError(error, gate.dialect, fence.resource, inGuard);
  }
}

/**
 * The stored mark for `resource`, or `null` if no token was ever accepted for it. A read, not a fence.
 * `options` may be the same object passed to {@link fenced}; `isolationLevel` and `lockTimeoutMs` do nothing here.
 */
export async function highWaterMark<DB>(
  db: Kysely<DB>,
  resource: string,
  options: FencingTableOptions = {},
): Promise<bigint | null> {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  const checked = assertResource(resource);
  const gate = resolveGate(db, options);
  return readMark(db, gate.sql.highWaterMark, checked);
}

interface Fence {
  readonly resource: string;
  readonly token: bigint;
}

async function guard<DB>(
  trx: Kysely<DB>,
  gate: Gate,
  fence: Fence,
  lockTimeout: CompiledQuery | undefined,
): Promise<void> {
  if (lockTimeout !== undefined) await trx.executeQuery(lockTimeout);
  const token = fence.token.toString();
  const parameters = gate.sql.guardParameters.map((p) => (p === 'resource' ? fence.resource : token));
  const result = await trx.executeQuery(CompiledQuery.raw(gate.sql.guard, parameters));
  if (gate.dialect.verdict(result) === 'accepted') return;
  const mark = await readMark(trx, gate.sql.lockedHighWaterMark, fence.resource);
  if (mark === null) throw new Error(`fence row for "${fence.resource}" vanished while locked`);
  // The guard can only raise the mark, so mark >= token here: equal means this write is the one that
  // set it (MySQL's insert path); greater means another holder got there first.
  if (mark > fence.token) throw new StaleFencingTokenError(fence.resource, fence.token, mark);
}

async function readMark<DB>(db: Kysely<DB>, sql: string, resource: string): Promise<bigint | null> {
  const result = await db.executeQuery(CompiledQuery.raw(sql, [resource]));
  const row = result.rows[0] as { last_token: string } | undefined;
  return row === undefined ? null : BigInt(row.last_token);
}

function lockTimeoutStatement(dialect: FencingDialect, ms: number | undefined): CompiledQuery | undefined {
  if (ms === undefined) return undefined;
  if (dialect.name !== 'postgres') {
    throw new InvalidArgumentError(
      'options.lockTimeoutMs',
      `is supported on postgres only, not ${dialect.name}`,
    );
  }
  if (!Number.isSafeInteger(ms) || ms < 1 || ms > 2_147_483_647) {
    throw new InvalidArgumentError('options.lockTimeoutMs', 'must be an integer in 1..2147483647');
  }
  // A validated integer, not caller text; SET takes no bind parameters.
  return CompiledQuery.raw(`SET LOCAL lock_timeout = ${ms}`);
}

const ISOLATION_LEVELS: readonly string[] = ['read committed', 'repeatable read', 'serializable'];

function validateIsolation(dialect: FencingDialect, level: string): void {
  if (!ISOLATION_LEVELS.includes(level)) {
    throw new InvalidArgumentError('options.isolationLevel', `must be one of ${ISOLATION_LEVELS.join(', ')}`);
  }
  if (dialect.name === 'sqlite' && level !== 'serializable') {
    throw new InvalidArgumentError(
      'options.isolationLevel',
      'must be serializable on SQLite (it has no other)',
    );
  }
}

/**
 * Conflicts abort the whole transaction wherever they happen, so they are mapped from the callback and the
 * commit too; a lock-wait timeout is the gate's only when the gate was the one waiting.
 */
function mapError(error: unknown, dialect: FencingDialect, resource: string, inGuard: boolean): unknown {
  const kind = dialect.classify(error);
  if (kind === 'conflict') return new FenceConflictError(resource, error);
  if (kind === 'busy' && inGuard) return new FenceBusyError(resource, error);
  return error;
}
