/**
 * The parts of node-postgres the gate calls, declared structurally so this package's types never import `pg`:
 * `pg.Pool`, `pg.PoolClient` and `pg.Client` all satisfy them, and so do test doubles or wrappers that keep the
 * same method shapes.
 */

/** What a query resolves to; `command` is the tag PostgreSQL sent (`COMMIT`, `ROLLBACK`, `INSERT`, …). */
export interface PgQueryResultLike {
  /** The rows the statement returned; empty for a statement that returns none. */
  readonly rows: readonly unknown[];
  /** The command tag; the gate reads it after COMMIT to catch a transaction PostgreSQL rolled back instead. */
  readonly command?: string;
}

/** A connection, or anything with `query` (a pool qualifies for {@link FencingGate.highWaterMark}). */
export interface PgClientLike {
  /** Runs one statement with `$1`, `$2`… bound to `values`; rejects with pg's error (carrying `code`) on failure. */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  /**
   * `'I'` idle, `'T'` in a transaction, `'E'` in a failed transaction; `pg` reports what the server said in its
   * last ReadyForQuery. Older `pg` versions lack it, and then the gate cannot detect misuse for free.
   */
  getTransactionStatus?(): string | null;
}

/** A client checked out of a pool; `release(err)` with an error destroys the connection instead of reusing it. */
export interface PgPoolClientLike extends PgClientLike {
  /** Returns the client to its pool; given an error (the gate passes a failed ROLLBACK's) the pool destroys it. */
  release(err?: Error | boolean): void;
  /** pg-pool leaves checked-out clients without an 'error' listener; the gate adds one while it holds a client. */
  on?(event: 'error', listener: (err: Error) => void): unknown;
  /** Removes the listener the gate added with `on`, before it releases the client. */
  removeListener?(event: 'error', listener: (err: Error) => void): unknown;
}

/** A pool: `connect()` checks a client out. `idleCount` tells a pool apart from a `pg.Client` (both `connect`). */
export interface PgPoolLike {
  /** Runs one statement on whichever client the pool picks; the gate uses it only outside a transaction. */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  /** Checks a client out; the gate releases it when its transaction ends. */
  connect(): Promise<PgPoolClientLike>;
  /** Idle clients in the pool; the gate reads only that it is a number. */
  readonly idleCount: number;
}

/** Marks a type that is not a pool, so overloads taking a client never match a pool. */
export interface NotAPool {
  /** Absent: a value with a numeric `idleCount` is a pool. */
  readonly idleCount?: never;
}

/** Anything the gate accepts as a database handle. */
export type PgQueryable = PgPoolLike | PgClientLike;

export function isPool(db: PgQueryable): db is PgPoolLike {
  return (
    typeof (db as Partial<PgPoolLike>).connect === 'function' &&
    typeof (db as Partial<PgPoolClientLike>).release !== 'function' &&
    typeof (db as Partial<PgPoolLike>).idleCount === 'number'
  );
}

/**
 * True for a handle that is one connection as far as its shape says: a pool client (`release`), `pg.Client`
 * (`processID`; `getTransactionStatus` since 8.23), pg-native's client (`_connected`), or a wrapper that passes
 * `getTransactionStatus` on. Anything else may be a pool behind a wrapper (one that dropped `idleCount`, or kept only
 * `query`): each of the gate's statements could then run on another pooled connection, the guard in autocommit,
 * fencing nothing, while the call reports success.
 */
export function isRecognisedClient(db: PgQueryable): boolean {
  const handle = db as Partial<Record<'release' | 'getTransactionStatus', unknown>>;
  if (isPool(db)) return false;
  return (
    typeof handle.release === 'function' ||
    typeof handle.getTransactionStatus === 'function' ||
    'processID' in db ||
    '_connected' in db
  );
}
