import { type Clock, InvalidArgumentError } from '@dlock/core';
import { rejectUnknownKeys } from '@dlock/core/adapter';
import { isPGlite, type PGliteLike, type PgListenClientLike, type PgPoolLike } from './client-like.js';
import { assertSchemaName, assertTablePrefix } from './sql.js';

/**
 * Options of {@link PostgresLockService}, checked when it is constructed: a bad value or an unknown key throws
 * `InvalidArgumentError` before any I/O.
 */
export interface PostgresLockServiceOptions {
  /**
   * A `pg.Pool` (owned by the caller: the service never ends it), or a `PGlite` instance for an embedded database.
   * Every statement is one round trip on whichever connection the pool hands out.
   */
  readonly pool: PgPoolLike | PGliteLike;
  /** Schema of the tables. Default: none, so the connections' `search_path` decides (usually `public`). */
  readonly schema?: string;
  /**
   * Prepended to the table names (`<prefix>tokens`, `<prefix>leases`, `<prefix>waiters`): this adapter's
   * `keyPrefix`. Default `"dlock_"`. Services with different prefixes share nothing.
   */
  readonly tablePrefix?: string;
  /**
   * Where wake-ups for queued waiters arrive (`LISTEN` on one connection per service, opened while someone waits).
   * `true` (default): a connection checked out of `pool` for as long as it listens, destroyed afterwards rather than
   * returned with its `LISTEN` (PGlite: its own `listen`). A function: a connection you open, e.g. a `pg.Client` to
   * the server directly when `pool` goes through PgBouncer in transaction mode, which cannot carry `LISTEN`; the
   * service ends it when done. `false`: no notices; waiters look again on a backoff. Never needed for correctness.
   */
  readonly listen?: boolean | (() => Promise<PgListenClientLike>);
  /**
   * Send the statements as named prepared statements (pg only; PGlite ignores it), parsed and planned once per
   * connection instead of at every call: several times less server CPU per statement. Default `false`, because a
   * prepared statement lives in the server connection: use it on direct connections, or behind PgBouncer 1.21+ with
   * `max_prepared_statements` set; an older transaction-pooling proxy fails such statements.
   */
  readonly preparedStatements?: boolean;
  /** Upper bound on each statement, in ms. Default 3000. Keep it below the `LockClient`'s `operationTimeoutMs`. */
  readonly requestTimeoutMs?: number;
  /** Where the service reads time and sleeps (deadlines, waits, backoff). Default `systemClock`. */
  readonly clock?: Clock;
}

export interface ResolvedOptions {
  readonly pool: PgPoolLike | PGliteLike;
  readonly schema: string | undefined;
  readonly tablePrefix: string;
  readonly listen: boolean | (() => Promise<PgListenClientLike>);
  readonly preparedStatements: boolean;
  readonly requestTimeoutMs: number;
  /** Undefined: `systemClock`. */
  readonly clock?: Clock;
}

const OPTION_KEYS = [
  'pool',
  'schema',
  'tablePrefix',
  'listen',
  'preparedStatements',
  'requestTimeoutMs',
  'clock',
] as const;
const CLOCK_METHODS = ['now', 'monotonic', 'sleep', 'random'] as const;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

export function positiveInt(value: unknown, field: string, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidArgumentError(field, `must be an integer from 1 to ${max}, got ${String(value)}`);
  }
  return value;
}

/** pg's `Client` carries its `connectionParameters`; its `Pool` has none, and counts its clients (`totalCount`). */
function isPgClient(value: object): boolean {
  return 'connectionParameters' in value && !('totalCount' in value);
}

function isPool(value: unknown): value is PgPoolLike | PGliteLike {
  if (!isObject(value) || typeof value['query'] !== 'function') return false;
  return typeof value['connect'] === 'function' || isPGlite(value as unknown as PGliteLike);
}

/**
 * A pool of one connection cannot serve both the service's `LISTEN` and its statements: while someone waits, the
 * listener holds the only connection, every statement (the holder's release included) times out waiting for one,
 * and the waiter never hears that the lock is free. Refused up front, where `pg.Pool` states its limit
 * (`options.max`, already defaulted by the pool).
 */
function refuseOneConnectionPool(pool: PgPoolLike): void {
  const settings = (pool as unknown as Record<string, unknown>)['options'];
  const max = isObject(settings) ? settings['max'] : undefined;
  if (typeof max === 'number' && max < 2) {
    throw new InvalidArgumentError(
      'options.pool',
      `allows ${max} connection (max: ${max}), which the service's LISTEN holds while anyone waits, leaving none ` +
        'for its statements: give the pool max 2 or more, pass `listen` a function that opens a connection of its ' +
        'own, or set `listen: false`',
    );
  }
}

export function resolveOptions(options: unknown): ResolvedOptions {
  if (!isObject(options)) throw new InvalidArgumentError('options', 'must be an object with a pool');
  // A misspelt key (`requestTimeout`, `tablePrefx`) would otherwise leave its default in force without a word.
  rejectUnknownKeys(options, 'options', OPTION_KEYS);
  const pool = options['pool'];
  if (!isPool(pool)) {
    throw new InvalidArgumentError(
      'options.pool',
      'must be a pg.Pool (new pg.Pool(...)) or a PGlite instance',
    );
  }
  if (isPgClient(pool)) {
    // It has query and connect like a pool, but its connect() opens its one socket (or fails once open) and hands
    // out no client to give back: every statement would fail at run time as a TransportError.
    throw new InvalidArgumentError(
      'options.pool',
      'is a pg.Client, one connection; pass a pg.Pool (new pg.Pool(...)), or a function returning a connected ' +
        'pg.Client as options.listen',
    );
  }
  const schema =
    options['schema'] === undefined ? undefined : assertSchemaName(options['schema'], 'options.schema');
  const tablePrefix =
    options['tablePrefix'] === undefined
      ? 'dlock_'
      : assertTablePrefix(options['tablePrefix'], 'options.tablePrefix');
  const listen = options['listen'] ?? true;
  if (typeof listen !== 'boolean' && typeof listen !== 'function') {
    throw new InvalidArgumentError(
      'options.listen',
      'must be a boolean or a function returning a connection',
    );
  }
  if (listen === true && !isPGlite(pool as PGliteLike)) refuseOneConnectionPool(pool as PgPoolLike);
  const prepared = options['preparedStatements'] ?? false;
  if (typeof prepared !== 'boolean') {
    throw new InvalidArgumentError('options.preparedStatements', 'must be a boolean');
  }
  const clock = options['clock'];
  if (
    clock !== undefined &&
    !(isObject(clock) && CLOCK_METHODS.every((m) => typeof clock[m] === 'function'))
  ) {
    throw new InvalidArgumentError('options.clock', `must be a Clock (${CLOCK_METHODS.join(', ')})`);
  }
  const timeout = options['requestTimeoutMs'];
  return {
    pool,
    schema,
    tablePrefix,
    listen: listen as ResolvedOptions['listen'],
    preparedStatements: prepared,
    requestTimeoutMs:
      timeout === undefined ? 3_000 : positiveInt(timeout, 'options.requestTimeoutMs', 600_000),
    ...(clock === undefined ? {} : { clock: clock as unknown as Clock }),
  };
}
