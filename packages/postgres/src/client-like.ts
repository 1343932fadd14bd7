/**
 * The parts of node-postgres and PGlite the service calls, declared structurally so this package's types never
 * import either: `pg.Pool` satisfies {@link PgPoolLike}, a `PGlite` instance {@link PGliteLike}. Test doubles and
 * wrappers that keep these method shapes work too.
 */

/** What a query resolves to. The service casts every column it reads to text, so no type parser matters. */
export interface PgQueryResultLike {
  /** The rows the statement returned. */
  readonly rows: readonly unknown[];
}

/** A notification as `pg` emits it on a connection that ran `LISTEN`. */
export interface PgNotificationLike {
  /** The channel the notice was sent on. */
  readonly channel: string;
  /** The text sent with it, if any. */
  readonly payload?: string | undefined;
}

/**
 * A connection the service keeps for `LISTEN` (its one dedicated connection). `pg.Client` and a `pg.PoolClient`
 * both fit. The service calls `release` when it has it (a pool's client goes back, destroyed on error), else `end`.
 */
export interface PgListenClientLike {
  /** Runs one statement on this connection (the service's `LISTEN` and its checks). */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  /** Each notice for a channel this connection listens on. */
  on(event: 'notification', listener: (message: PgNotificationLike) => void): unknown;
  /** The connection failed; the service then opens another. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** The connection closed; the service then opens another. */
  on(event: 'end', listener: () => void): unknown;
  /** Removes a listener added with `on`, when the service lets the connection go. */
  removeListener?(event: string, listener: (...args: unknown[]) => void): unknown;
  /** Gives a pool's client back; the service always passes an error, so the pool destroys the connection. */
  release?(error?: Error | boolean): void;
  /** Closes a connection that did not come from a pool. */
  end?(): Promise<void> | void;
}

/**
 * A statement as the service sends it to a pool: pg's query config, named when statements are prepared, and with
 * pg's `query_timeout` (the pool destroys a connection whose statement ran past it).
 */
export interface PgQueryConfigLike {
  /** The prepared statement's name; absent when statements are not prepared. */
  readonly name?: string;
  /** The statement's SQL. */
  readonly text: string;
  /**
   * The values bound to `$1`, `$2`…: strings, numbers, arrays, null, and one object with pg's `toPostgres()` (an
   * acquire statement's bound, read when pg writes the statement to a connection).
   */
  readonly values: unknown[];
  /** pg's bound on the statement, in ms, after which the pool destroys the connection. */
  readonly query_timeout: number;
}

/**
 * A client checked out of a pool (`pg.PoolClient`): each statement of the service runs on one, taken with `connect`
 * so that a statement whose caller gave up while it waited for it goes back unsent.
 */
export interface PgPoolClientLike extends PgListenClientLike {
  /** Runs one statement as a query config (see {@link PgPoolLike.query}). */
  query(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
  /** Runs SQL text (pg's own overload; the service's `LISTEN` and its checks). */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  /** Gives the client back to its pool; with an error, the pool destroys the connection. */
  release(error?: Error | boolean): void;
}

/**
 * A `pg.Pool` (or anything with its `query` and `connect`): each statement runs on whichever connection is free.
 * Every statement arrives as a config object ({@link PgQueryConfigLike}): most on a client taken with `connect` (and
 * given back unsent when their caller gave up while they waited for it), a clean-up or a wake-up, still worth running
 * late, through `query`; the DDL of `ensureSchema` too, with no values, so that pg sends it as one simple query of
 * several statements.
 */
export interface PgPoolLike {
  /** Runs SQL text (pg's own overload; the service itself always sends a config object). */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  /** Runs one statement as a query config (or the DDL, with no values). */
  query(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
  /** Checks a client out: for each statement, and one the service keeps for `LISTEN`. */
  connect(): Promise<PgPoolClientLike>;
}

/** A `PGlite` instance: one embedded database, one connection, with its own `listen`. */
export interface PGliteLike {
  /** Runs one statement with `$1`, `$2`… bound to `params`. */
  query(text: string, params?: unknown[]): Promise<PgQueryResultLike>;
  /** Runs SQL text of several statements; the service sends its DDL this way. */
  exec(text: string): Promise<unknown>;
  /** Listens on `channel`; resolves to the function that stops listening. */
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
}

/** Tells a PGlite instance from a pool: only PGlite has `listen` and `exec` and no `connect`. */
export function isPGlite(db: PgPoolLike | PGliteLike): db is PGliteLike {
  const candidate = db as Partial<PGliteLike & PgPoolLike>;
  return (
    typeof candidate.listen === 'function' &&
    typeof candidate.exec === 'function' &&
    typeof candidate.connect !== 'function'
  );
}
