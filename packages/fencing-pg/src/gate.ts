import {
  assertCallback,
  assertResource,
  checkGate,
  createTableRacingOthers,
  errorProperty,
  type FenceCall,
  type FencingTokenInput,
  InvalidArgumentError,
  type IsolationLevel,
  parseFence,
  parseIsolationLevel,
  parseLockTimeoutMs,
  rejectUnknownKeys,
  runGate,
  type TransactionDriver,
} from '@dlock/fencing-common';
import {
  isPool,
  isRecognisedClient,
  type NotAPool,
  type PgClientLike,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgQueryable,
} from './client-like.js';
import { pgDriver, readMark, transactionStatus } from './pg-driver.js';
import { type FencingSql, type FencingTableOptions, fencingSql } from './sql.js';

export type { IsolationLevel };

/** Per-call options of {@link FencingGate.runFenced}. */
export interface RunOptions {
  /**
   * Default `'read committed'`, where the gate never raises a serialization failure. Under `'repeatable read'` and
   * `'serializable'`, a concurrent writer of the same resource (or an SSI cycle) aborts the transaction with
   * {@link FenceConflictError}; wrap the call in `withFenceRetry`.
   */
  readonly isolationLevel?: IsolationLevel;
  /**
   * Bound, in ms, on each lock wait in the transaction (`SET LOCAL lock_timeout`, sent with BEGIN in the same round
   * trip). When the gate's wait for the fence row runs out it throws {@link FenceBusyError}; a timeout in your
   * callback surfaces as pg's own error (SQLSTATE 55P03). Default: PostgreSQL's setting (normally unbounded).
   */
  readonly lockTimeoutMs?: number;
}

const RUN_OPTION_KEYS: readonly string[] = ['isolationLevel', 'lockTimeoutMs'];
const FAILED_TRANSACTION = 'is inside a failed transaction; roll it back';

/**
 * A fencing-token gate on PostgreSQL: inside the transaction that performs a protected write, it refuses tokens
 * lower than the highest one already seen for the resource, and raises that high-water mark otherwise.
 *
 * Two verbs, the same in `@dlock/fencing-kysely`: {@link runFenced} opens the transaction and runs your callback
 * behind the gate; {@link checkFence} is the gate alone, inside a transaction you opened.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { FencingGate } from '@dlock/fencing-pg';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const gate = new FencingGate();           // table "dlock_fencing"
 * await gate.ensureSchema(pool);            // once, at deploy time
 * await gate.runFenced(pool, 'orders/42', lock.fencingToken, (tx) =>
 *   tx.query('UPDATE orders SET status = $1 WHERE id = 42', ['shipped']),
 * );
 * ```
 */
export class FencingGate {
  /** The statements this gate runs; `sql.createTable` is the migration text. */
  readonly sql: FencingSql;
  readonly #driver: TransactionDriver<PgQueryable, PgClientLike>;

  /**
   * Throws {@link InvalidArgumentError} for a table or schema name outside `[A-Za-z_][A-Za-z0-9_]{0,62}`, and for
   * any key other than `table` and `schema` (a misspelt `tabel` would otherwise put the marks in the default table).
   */
  constructor(options: FencingTableOptions = {}) {
    this.sql = fencingSql(options);
    this.#driver = pgDriver(this.sql);
    Object.freeze(this);
  }

  /**
   * Creates the fence table if it is missing. Safe to call concurrently and repeatedly; the schema must exist.
   * Accepts a pool or a client. Inside your own transaction it commits with it, and a lost creation race (see
   * below) aborts that transaction instead of being retried.
   */
  async ensureSchema(db: PgQueryable): Promise<void> {
    assertQueryable(db, 'db');
    await createTableRacingOthers(() => db.query(this.sql.createTable));
  }

  /**
   * Runs `fn` in a new transaction fenced by `token`: BEGIN; guard; `fn(tx)`; COMMIT. On any error it rolls back,
   * so a rejected token, a failed mutation or a failed COMMIT leaves the mark and your data untouched.
   *
   * With a pool, a client is checked out and always released; if ROLLBACK fails the client is released with the
   * error so the pool destroys it rather than handing out a broken connection. With a client, it must be idle
   * (not inside BEGIN): use {@link checkFence} inside your own transaction instead.
   *
   * `fn` receives the client that holds the transaction; run every protected query on it, not on the pool.
   * Annotate its parameter (`(tx: PoolClient) => …`) to get pg's full client type with a pool.
   *
   * @throws {StaleFencingTokenError} `token` is below the stored mark; nothing was written.
   * @throws {FenceConflictError} a serialization failure or deadlock (40001, 40P01) anywhere in the transaction.
   * @throws {FenceBusyError} `lockTimeoutMs` ran out while waiting for the fence row.
   * @throws {InvalidArgumentError} bad resource, token or options (an unknown key included), before any SQL; or a
   *   client already in a transaction.
   */
  runFenced<T, C extends PgPoolClientLike = PgPoolClientLike>(
    db: PgPoolLike,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  runFenced<C extends PgClientLike, T>(
    db: C & NotAPool,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  runFenced<T>(
    db: PgQueryable,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: PgClientLike) => Promise<T>,
    options?: RunOptions,
  ): Promise<T> {
    return this.#runFenced(db, resource, token, fn, options);
  }

  /**
   * The gate alone, for a transaction you opened yourself: call it first, on the same client as the write.
   * When it throws, roll back; a stale token leaves the fence row locked until you do.
   *
   * Refuses a pool (each `pool.query` may pick another connection) and, on `pg` versions that report it, a client
   * that is not inside a transaction (the mark would commit on its own and fence nothing).
   *
   * @example
   * ```ts
   * await client.query('BEGIN');
   * try {
   *   await gate.checkFence(client, 'orders/42', lock.fencingToken);
   *   await client.query('UPDATE orders SET status = $1 WHERE id = 42', ['shipped']);
   *   await client.query('COMMIT');
   * } catch (e) { await client.query('ROLLBACK'); throw e; }
   * ```
   */
  async checkFence(tx: PgClientLike & NotAPool, resource: string, token: FencingTokenInput): Promise<void> {
    const fence = parseFence(resource, token);
    assertQueryable(tx, 'tx');
    assertRecognisable(tx, 'tx');
    if (isPool(tx)) {
      throw new InvalidArgumentError('tx', 'must be a client checked out of the pool, not the pool itself');
    }
    const status = transactionStatus(tx);
    if (status === 'I') throw new InvalidArgumentError('tx', 'is not inside a transaction; run BEGIN first');
    if (status === 'E') throw new InvalidArgumentError('tx', FAILED_TRANSACTION);
    try {
      await checkGate(this.#driver, tx, fence);
    } catch (error) {
      // pg rejects a failed statement before it reads the server's next status message, so right after a failure
      // getTransactionStatus() can still say 'T'. The guard, our first statement, then meets 25P02: the same misuse.
      if (errorProperty(error, 'code') === '25P02') throw new InvalidArgumentError('tx', FAILED_TRANSACTION);
      throw error;
    }
  }

  /**
   * @deprecated Use {@link runFenced}, the name `@dlock/fencing-kysely` shares; `run` is the same call and stays
   * until 1.0.
   */
  run<T, C extends PgPoolClientLike = PgPoolClientLike>(
    db: PgPoolLike,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  /** @deprecated Use {@link runFenced}; `run` is the same call and stays until 1.0. */
  run<C extends PgClientLike, T>(
    db: C & NotAPool,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  run<T>(
    db: PgQueryable,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: PgClientLike) => Promise<T>,
    options?: RunOptions,
  ): Promise<T> {
    return this.#runFenced(db, resource, token, fn, options);
  }

  /**
   * @deprecated Use {@link checkFence}, the name `@dlock/fencing-kysely` shares; `check` is the same call and stays
   * until 1.0.
   */
  check(tx: PgClientLike & NotAPool, resource: string, token: FencingTokenInput): Promise<void> {
    return this.checkFence(tx, resource, token);
  }

  /** The stored mark for `resource`, or `null` if no token was ever accepted for it. A read, not a fence. */
  async highWaterMark(db: PgQueryable, resource: string): Promise<bigint | null> {
    assertQueryable(db, 'db');
    return readMark(db, this.sql.highWaterMark, assertResource(resource));
  }

  async #runFenced<T>(
    db: PgQueryable,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: PgClientLike) => Promise<T>,
    options: RunOptions = {},
  ): Promise<T> {
    rejectUnknownKeys(options, 'options', RUN_OPTION_KEYS);
    const fence = parseFence(resource, token);
    const call: FenceCall = {
      resource: fence.resource,
      token: fence.token,
      isolationLevel: parseIsolationLevel(options.isolationLevel),
      lockTimeoutMs: parseLockTimeoutMs(options.lockTimeoutMs),
    };
    assertCallback(fn);
    assertQueryable(db, 'db');
    assertRecognisable(db, 'db');
    if (!isPool(db)) {
      const status = transactionStatus(db);
      if (status === 'T' || status === 'E') {
        // Our BEGIN would only warn and our COMMIT would end the caller's transaction early.
        throw new InvalidArgumentError(
          'db',
          'is already inside a transaction; call checkFence() within it instead',
        );
      }
    }
    return runGate(this.#driver, db, call, fn);
  }
}

/**
 * Refuses what cannot be a pool or a client before anything is sent: `null` or a connection string would
 * otherwise fail later as a TypeError from deep inside the gate.
 */
function assertQueryable(db: unknown, field: string): asserts db is PgQueryable {
  if ((typeof db !== 'object' && typeof db !== 'function') || db === null) {
    throw new InvalidArgumentError(field, 'must be a pg Pool, PoolClient or Client');
  }
  const handle = db as { query?: unknown; connect?: unknown; release?: unknown };
  if (typeof handle.query !== 'function') {
    throw new InvalidArgumentError(field, 'must be a pg Pool, PoolClient or Client (it has no query method)');
  }
}

/** For the verbs whose statements must share one connection: a handle the gate cannot recognise is refused. */
function assertRecognisable(db: PgQueryable, field: string): void {
  if (isPool(db) || isRecognisedClient(db)) return;
  const what =
    typeof (db as { connect?: unknown }).connect === 'function'
      ? 'has connect() but is neither a pg.Pool (numeric idleCount) nor a pg Client'
      : 'has query() but nothing that shows it is one connection (release, getTransactionStatus or processID)';
  throw new InvalidArgumentError(
    field,
    `${what}: its statements might not share one connection; pass the pool itself or a client`,
  );
}
