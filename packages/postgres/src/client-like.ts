/**
 * The parts of node-postgres and PGlite the service calls, declared structurally so this package's types never
 * import either: `pg.Pool` satisfies {@link PgPoolLike}, a `PGlite` instance {@link PGliteLike}. Test doubles and
 * wrappers that keep these method shapes work too.
 */

/** What a query resolves to. The service casts every column it reads to text, so no type parser matters. */
export interface PgQueryResultLike {
  readonly rows: readonly unknown[];
}

/** A notification as `pg` emits it on a connection that ran `LISTEN`. */
export interface PgNotificationLike {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/**
 * A connection the service keeps for `LISTEN` (its one dedicated connection). `pg.Client` and a `pg.PoolClient`
 * both fit. The service calls `release` when it has it (a pool's client goes back, destroyed on error), else `end`.
 */
export interface PgListenClientLike {
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  on(event: 'notification', listener: (message: PgNotificationLike) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeListener?(event: string, listener: (...args: unknown[]) => void): unknown;
  release?(error?: Error | boolean): void;
  end?(): Promise<void> | void;
}

/**
 * A statement as the service sends it to a pool: pg's query config, named when statements are prepared, and with
 * pg's `query_timeout` (the pool destroys a connection whose statement ran past it).
 */
export interface PgQueryConfigLike {
  readonly name?: string;
  readonly text: string;
  readonly values: unknown[];
  readonly query_timeout: number;
}

/**
 * A `pg.Pool` (or anything with its `query` and `connect`): each statement runs on whichever connection is free.
 * Statements arrive as a config object ({@link PgQueryConfigLike}), DDL as a string.
 */
export interface PgPoolLike {
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
  query(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
  connect(): Promise<PgListenClientLike>;
}

/** A `PGlite` instance: one embedded database, one connection, with its own `listen`. */
export interface PGliteLike {
  query(text: string, params?: unknown[]): Promise<PgQueryResultLike>;
  exec(text: string): Promise<unknown>;
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
