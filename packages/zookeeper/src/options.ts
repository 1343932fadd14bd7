import { type Clock, InvalidArgumentError, MAX_TIMER_MS, systemClock } from '@dlock/core';
import { rejectUnknownKeys } from '@dlock/core/adapter';
import { CLIENT_METHODS, hasMethod, missingMethods, type ZooKeeperClientLike } from './client-like.js';
import { validRoot } from './keys.js';

/** The options both forms of {@link ZooKeeperLockServiceOptions} share. */
export interface ZooKeeperLockServiceBaseOptions {
  /**
   * Where the locks live: a znode path such as `/dlock` (not a string prefix as in the other adapters: ZooKeeper
   * keys are nodes of a tree, and each lock is a child node of this one). Absolute, not `/`, not under
   * `/zookeeper`, no trailing `/`. Default `/dlock`. Keep it for locks: any of its children that stays empty and
   * without data for `idleParentMs` is deleted as an abandoned lock parent.
   */
  readonly keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same option under the name every adapter uses). Accepted until 1.0. */
  readonly root?: string;
  /**
   * Upper bound, in ms, on every single ZooKeeper request (node-zookeeper-client has none). Default: a third of
   * the session timeout, between 500 and 5000.
   */
  readonly requestTimeoutMs?: number;
  /**
   * A lock's parent node is deleted once no lock of this service has used it for this long, in ms. Parents other
   * processes left behind are deleted once seen empty that long: `keyPrefix` is looked through every 1 to 1.5 times
   * this (at least a second apart). Default 30000.
   */
  readonly idleParentMs?: number;
  /** Time source; give it the same clock as the `LockClient`. Default `systemClock`. */
  readonly clock?: Clock;
}

/** Use a client you created and connected. The service never closes it, and cannot replace its session. */
export interface ZooKeeperClientOptions extends ZooKeeperLockServiceBaseOptions {
  /** A node-zookeeper-client `Client` (1.1.x), created and connected by you. */
  readonly client: ZooKeeperClientLike;
}

/** Let the service create (and re-create, after a session ends) its own client. */
export interface ZooKeeperConnectionOptions extends ZooKeeperLockServiceBaseOptions {
  /** `host:port[,host:port…][/chroot]`. */
  readonly connectionString: string;
  /** The session timeout to ask for, in ms; the server clamps it to [2, 20] × its tickTime. Default 10000. */
  readonly sessionTimeoutMs?: number;
}

/**
 * Options of {@link ZooKeeperLockService}: a `client` or a `connectionString`, not both. Checked when the service is
 * constructed: a bad value or an unknown key throws `InvalidArgumentError` before any I/O.
 */
export type ZooKeeperLockServiceOptions = ZooKeeperClientOptions | ZooKeeperConnectionOptions;

export interface ResolvedOptions {
  readonly client: ZooKeeperClientLike | undefined;
  readonly connectionString: string | undefined;
  readonly sessionTimeoutMs: number;
  /** The node under which the locks live (`keyPrefix`, or its deprecated alias `root`). */
  readonly root: string;
  readonly requestTimeoutMs: number | undefined;
  readonly idleParentMs: number;
  readonly clock: Clock;
}

export const DEFAULT_SESSION_TIMEOUT_MS = 10_000;

/** Every key either form of the options may have; a misspelt one would otherwise silently mean "the default". */
const KNOWN_KEYS = [
  'connectionString',
  'sessionTimeoutMs',
  'client',
  'keyPrefix',
  'root',
  'requestTimeoutMs',
  'idleParentMs',
  'clock',
] as const;

function check(condition: boolean, field: string, problem: string): asserts condition {
  if (!condition) throw new InvalidArgumentError(field, problem);
}

function integerIn(value: unknown, field: string, min: number, max: number): number {
  check(
    typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max,
    field,
    `must be an integer from ${min} to ${max}, got ${String(value)}`,
  );
  return value;
}

/**
 * A value that is not an object, for a message: a primitive as it prints, a function by its type only (its own
 * toString may throw or run caller code).
 */
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'function') return 'a function';
  return `${typeof value} ${String(value)}`;
}

function isClock(value: unknown): value is Clock {
  return (
    typeof value === 'object' &&
    value !== null &&
    ['now', 'monotonic', 'sleep', 'random'].every((m) => hasMethod(value, m))
  );
}

export function resolveOptions(options: unknown): ResolvedOptions {
  check(typeof options === 'object' && options !== null, 'options', 'must be an object');
  // Before the checks below: `{ connectionStrng }` should name the typo, not say that neither key was given.
  rejectUnknownKeys(options, 'options', KNOWN_KEYS);
  const o = options as Record<string, unknown>;
  const hasClient = o['client'] !== undefined;
  const hasConnection = o['connectionString'] !== undefined;
  check(hasClient !== hasConnection, 'options', 'needs exactly one of `client` and `connectionString`');
  if (hasClient) {
    const client = o['client'];
    const missing = missingMethods(client);
    check(
      missing.length === 0,
      'options.client',
      `must be a node-zookeeper-client Client (or an object with its methods ${CLIENT_METHODS.join(', ')}); ${
        typeof client === 'object' && client !== null
          ? `the one passed lacks ${missing.join(', ')}`
          : `got ${describe(client)}`
      }`,
    );
    check(
      o['sessionTimeoutMs'] === undefined,
      'options.sessionTimeoutMs',
      'applies only with `connectionString` (a client you pass brings its own session timeout)',
    );
  } else {
    const cs = o['connectionString'];
    check(
      typeof cs === 'string' && cs.length > 0 && !/\s/.test(cs),
      'options.connectionString',
      'must be a non-empty `host:port[,host:port…][/chroot]` string',
    );
  }
  check(
    o['keyPrefix'] === undefined || o['root'] === undefined,
    'options.root',
    'is the deprecated name of keyPrefix: give only keyPrefix',
  );
  const rootField = o['root'] !== undefined ? 'root' : 'keyPrefix';
  const root = o[rootField] ?? '/dlock';
  check(
    typeof root === 'string' && validRoot(root),
    `options.${rootField}`,
    'must be an absolute znode path such as "/dlock" (not "/", not under "/zookeeper", no trailing "/")',
  );
  const clock = o['clock'] ?? systemClock;
  check(isClock(clock), 'options.clock', 'must be a Clock (now, monotonic, sleep, random)');
  return {
    client: hasClient ? (o['client'] as ZooKeeperClientLike) : undefined,
    connectionString: hasClient ? undefined : (o['connectionString'] as string),
    sessionTimeoutMs:
      o['sessionTimeoutMs'] === undefined
        ? DEFAULT_SESSION_TIMEOUT_MS
        : integerIn(o['sessionTimeoutMs'], 'options.sessionTimeoutMs', 100, MAX_TIMER_MS),
    root,
    requestTimeoutMs:
      o['requestTimeoutMs'] === undefined
        ? undefined
        : integerIn(o['requestTimeoutMs'], 'options.requestTimeoutMs', 10, MAX_TIMER_MS),
    idleParentMs:
      o['idleParentMs'] === undefined
        ? 30_000
        : integerIn(o['idleParentMs'], 'options.idleParentMs', 0, MAX_TIMER_MS),
    clock,
  };
}

/** The per-request bound for a session of the given timeout. */
export function requestTimeoutFor(sessionTimeoutMs: number, configured: number | undefined): number {
  return configured ?? Math.round(Math.min(5_000, Math.max(500, sessionTimeoutMs / 3)));
}
