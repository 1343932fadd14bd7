import {
  assertResource,
  createTableRacingOthers,
  FenceBusyError,
  FenceConflictError,
  type FencingTokenInput,
  InvalidArgumentError,
  parseFencingToken,
  rejectUnknownKeys,
  StaleFencingTokenError,
} from '@dlock/fencing-common';
import {
  isPool,
  type NotAPool,
  type PgClientLike,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgQueryable,
} from './client-like.js';
import { type FencingSql, type FencingTableOptions, fencingSql } from './sql.js';

/** Isolation levels `run` can open its transaction with. All three are tested; READ COMMITTED is the default. */
export type IsolationLevel = 'read committed' | 'repeatable read' | 'serializable';

/** Per-call options of {@link FencingGate.run}. */
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

const ISOLATION_SQL: Record<IsolationLevel, string> = {
  'read committed': 'READ COMMITTED',
  'repeatable read': 'REPEATABLE READ',
  serializable: 'SERIALIZABLE',
};

/**
 * A fencing-token gate on PostgreSQL: inside the transaction that performs a protected write, it refuses tokens
 * lower than the highest one already seen for the resource, and raises that high-water mark otherwise.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { FencingGate } from '@dlock/fencing-pg';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const gate = new FencingGate();           // table "dlock_fencing"
 * await gate.ensureSchema(pool);            // once, at deploy time
 * await gate.run(pool, 'orders/42', lock.fencingToken, (tx) =>
 *   tx.query('UPDATE orders SET status = $1 WHERE id = 42', ['shipped']),
 * );
 * ```
 */
export class FencingGate {
  /** The statements this gate runs; `sql.createTable` is the migration text. */
  readonly sql: FencingSql;

  /**
   * Throws {@link InvalidArgumentError} for a table or schema name outside `[A-Za-z_][A-Za-z0-9_]{0,62}`, and for
   * any key other than `table` and `schema` (a misspelt `tabel` would otherwise put the marks in the default table).
   */
  constructor(options: FencingTableOptions = {}) {
    this.sql = fencingSql(options);
    Object.freeze(this);
  }

  /**
   * Creates the fence table if it is missing. Safe to call concurrently and repeatedly; the schema must exist.
   * Accepts a pool or a client. Inside your own transaction it commits with it, and a lost creation race (see
   * below) aborts that transaction instead of being retried.
   */
  async ensureSchema(db: PgQueryable): Promise<void> {
    await createTableRacingOthers(() => db.query(this.sql.createTable));
  }

  /**
   * Runs `fn` in a new transaction fenced by `token`: BEGIN; guard; `fn(tx)`; COMMIT. On any error it rolls back,
   * so a rejected token, a failed mutation or a failed COMMIT leaves the mark and your data untouched.
   *
   * With a pool, a client is checked out and always released; if ROLLBACK fails the client is released with the
   * error so the pool destroys it rather than handing out a broken connection. With a client, it must be idle
   * (not inside BEGIN): use {@link check} inside your own transaction instead.
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
  run<T, C extends PgPoolClientLike = PgPoolClientLike>(
    db: PgPoolLike,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  run<C extends PgClientLike, T>(
    db: C & NotAPool,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: C) => Promise<T>,
    options?: RunOptions,
  ): Promise<T>;
  async run<T>(
    db: PgQueryable,
    resource: string,
    token: FencingTokenInput,
    fn: (tx: PgClientLike) => Promise<T>,
    options: RunOptions = {},
  ): Promise<T> {
    rejectUnknownKeys(options, 'options', RUN_OPTION_KEYS);
    const fence = { resource: assertResource(resource), token: parseFencingToken(token) };
    const begin = beginStatement(options);
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'must be a function');
    if (!isPool(db)) {
      const status = db.getTransactionStatus?.();
      if (status === 'T' || status === 'E') {
        // Our BEGIN would only warn and our COMMIT would end the caller's transaction early.
        throw new InvalidArgumentError(
          'db',
          'is already inside a transaction; call check() within it instead',
        );
      }
      return this.#transaction(db, fence, begin, fn).then(unwrap);
    }
    const client = await db.connect();
    // A backend that dies while we hold its client makes pg emit 'error', which would crash the process with
    // no listener attached; the same failure already reaches us as a rejected query, so the event can be dropped.
    const ignore = () => {};
    client.on?.('error', ignore);
    let outcome: Outcome<T> | undefined;
    try {
      outcome = await this.#transaction(client, fence, begin, fn);
      return unwrap(outcome);
    } finally {
      client.removeListener?.('error', ignore);
      client.release(outcome?.broken);
    }
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
   *   await gate.check(client, 'orders/42', lock.fencingToken);
   *   await client.query('UPDATE orders SET status = $1 WHERE id = 42', ['shipped']);
   *   await client.query('COMMIT');
   * } catch (e) { await client.query('ROLLBACK'); throw e; }
   * ```
   */
  async check(tx: PgClientLike & NotAPool, resource: string, token: FencingTokenInput): Promise<void> {
    const fence = { resource: assertResource(resource), token: parseFencingToken(token) };
    if (isPool(tx)) {
      throw new InvalidArgumentError('tx', 'must be a client checked out of the pool, not the pool itself');
    }
    const status = tx.getTransactionStatus?.();
    if (status === 'I') throw new InvalidArgumentError('tx', 'is not inside a transaction; run BEGIN first');
    if (status === 'E') throw new InvalidArgumentError('tx', 'is inside a failed transaction; roll it back');
    try {
      await this.#guard(tx, fence);
    } catch (error) {
      throw classify(error, fence.resource, true);
    }
  }

  /** The stored mark for `resource`, or `null` if no token was ever accepted for it. A read, not a fence. */
  async highWaterMark(db: PgQueryable, resource: string): Promise<bigint | null> {
    const result = await db.query(this.sql.highWaterMark, [assertResource(resource)]);
    const row = result.rows[0] as { last_token: string } | undefined;
    return row === undefined ? null : BigInt(row.last_token);
  }

  async #guard(client: PgClientLike, fence: Fence): Promise<void> {
    const accepted = await client.query(this.sql.guard, [fence.resource, fence.token.toString()]);
    if (accepted.rows.length === 1) return;
    // Zero rows: the row exists, is locked by this transaction and holds a larger token, so this read is stable.
    const mark = await this.highWaterMark(client, fence.resource);
    if (mark === null) throw new Error(`fence row for "${fence.resource}" vanished while locked`);
    throw new StaleFencingTokenError(fence.resource, fence.token, mark);
  }

  async #transaction<T>(
    client: PgClientLike,
    fence: Fence,
    begin: string,
    fn: (tx: PgClientLike) => Promise<T>,
  ): Promise<Outcome<T>> {
    let inGuard = true;
    try {
      await client.query(begin);
      await this.#guard(client, fence);
      inGuard = false;
      const value = await fn(client);
      const commit = await client.query('COMMIT');
      // PostgreSQL answers COMMIT of a failed transaction with a ROLLBACK tag and no error, which is what
      // happens when `fn` catches a query error and returns normally. Reporting success would be a lie.
      if (commit.command === 'ROLLBACK') {
        return {
          ok: false,
          error: new Error(
            `transaction fenced on "${fence.resource}" was rolled back: a statement in the callback failed`,
          ),
        };
      }
      return { ok: true, value };
    } catch (error) {
      let broken: Error | undefined;
      try {
        await client.query('ROLLBACK');
      } catch (rollbackError) {
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      }
      return { ok: false, error: classify(error, fence.resource, inGuard), broken };
    }
  }
}

interface Fence {
  readonly resource: string;
  readonly token: bigint;
}

type Outcome<T> =
  | { readonly ok: true; readonly value: T; readonly broken?: undefined }
  | { readonly ok: false; readonly error: unknown; readonly broken?: Error | undefined };

function unwrap<T>(outcome: Outcome<T>): T {
  if (outcome.ok) return outcome.value;
  throw outcome.error;
}

function beginStatement(options: RunOptions): string {
  const level = options.isolationLevel ?? 'read committed';
  const isolation = ISOLATION_SQL[level];
  if (!Object.hasOwn(ISOLATION_SQL, level) || isolation === undefined) {
    throw new InvalidArgumentError(
      'options.isolationLevel',
      `must be one of ${Object.keys(ISOLATION_SQL).join(', ')}`,
    );
  }
  const timeout = options.lockTimeoutMs;
  if (timeout === undefined) return `BEGIN ISOLATION LEVEL ${isolation}`;
  if (!Number.isSafeInteger(timeout) || timeout < 1 || timeout > 2_147_483_647) {
    throw new InvalidArgumentError('options.lockTimeoutMs', 'must be an integer in 1..2147483647');
  }
  // One simple-protocol round trip carries both statements; the value is a validated integer, not user text.
  return `BEGIN ISOLATION LEVEL ${isolation}; SET LOCAL lock_timeout = ${timeout}`;
}

/** Maps the SQLSTATEs a retry can cure to the retryable fencing errors; anything else passes through. */
function classify(error: unknown, resource: string, inGuard: boolean): unknown {
  const code = sqlState(error);
  if (code === '40001' || code === '40P01') return new FenceConflictError(resource, error);
  if (code === '55P03' && inGuard) return new FenceBusyError(resource, error);
  return error;
}

function sqlState(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}
