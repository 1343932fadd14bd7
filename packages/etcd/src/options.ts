import { type Clock, InvalidArgumentError, MAX_TIMER_MS } from '@dlock/core';
import { rejectUnknownKeys } from '@dlock/core/adapter';
import type { EtcdClientLike } from './client-like.js';

/** Session mode's settings, for the `session` option of {@link EtcdLockServiceOptions}. */
export interface EtcdSessionOptions {
  /**
   * TTL of the shared session lease in ms (rounded up to whole seconds). Default: each acquire's own `ttlMs`.
   * A session lease longer than the locks' TTL lets most acquires skip the keep-alive that otherwise refreshes
   * the session before a lock joins it — at the price that a crashed client's locks stay held for this long.
   */
  readonly ttlMs?: number;
}

/**
 * Options of {@link EtcdLockService}, checked when it is constructed: a bad value or an unknown key throws
 * `InvalidArgumentError` before any I/O.
 */
export interface EtcdLockServiceOptions {
  /** An `etcd3` client (`new Etcd3({ hosts })`), owned by the caller: the service never closes it. */
  readonly client: EtcdClientLike;
  /**
   * Prepended to every key the service writes. Default `"dlock/"`. Keys are written through the client's raw API,
   * so a namespace set with `client.namespace()` does not apply: put it here instead.
   */
  readonly keyPrefix?: string;
  /** @deprecated Use `keyPrefix` (the same option under the name every adapter uses). Accepted until 1.0. */
  readonly prefix?: string;
  /**
   * Session mode: every lock this service holds rides on one shared lease (one per distinct TTL), as etcd's
   * `concurrency.Session` does, so keeping 1,000 locks costs one keep-alive per renewal interval, and acquiring
   * costs no lease grant. If that lease is lost, every lock on it is lost at once. Default `false`: a lease per lock.
   */
  readonly session?: boolean | EtcdSessionOptions;
  /** Upper bound on each etcd request, in ms. Default 3000. Keep it below the `LockClient`'s `operationTimeoutMs`. */
  readonly requestTimeoutMs?: number;
  /** Where the service reads time and sleeps (deadlines, lease validity, waits). Default `systemClock`. */
  readonly clock?: Clock;
}

export interface ResolvedOptions {
  readonly client: EtcdClientLike;
  /** The key prefix (`keyPrefix`, or its deprecated alias `prefix`). */
  readonly prefix: string;
  /** Undefined: a lease per lock. Otherwise the minimum session TTL in ms (0: the acquire's own). */
  readonly sessionTtlMs: number | undefined;
  readonly requestTimeoutMs: number;
  /** Undefined: `systemClock`. */
  readonly clock?: Clock;
}

const OPTION_KEYS = ['client', 'keyPrefix', 'prefix', 'session', 'requestTimeoutMs', 'clock'] as const;
const CLOCK_METHODS = ['now', 'monotonic', 'sleep', 'random'] as const;
const SESSION_KEYS = ['ttlMs'] as const;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

function positiveInt(value: unknown, field: string, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidArgumentError(field, `must be an integer from 1 to ${max}, got ${String(value)}`);
  }
  return value;
}

export function resolveOptions(options: unknown): ResolvedOptions {
  if (!isObject(options)) throw new InvalidArgumentError('options', 'must be an object with a client');
  // A misspelt key (`requestTimeout`, `sessions`) would otherwise leave its default in force without a word.
  rejectUnknownKeys(options, 'options', OPTION_KEYS);
  const client = options['client'];
  if (
    !isObject(client) ||
    !isObject(client['kv']) ||
    !isObject(client['leaseClient']) ||
    !isObject(client['watchClient'])
  ) {
    throw new InvalidArgumentError('options.client', 'must be an etcd3 client (new Etcd3(...))');
  }
  if (options['keyPrefix'] !== undefined && options['prefix'] !== undefined) {
    throw new InvalidArgumentError(
      'options.prefix',
      'is the deprecated name of keyPrefix: give only keyPrefix',
    );
  }
  const prefixField = options['prefix'] !== undefined ? 'prefix' : 'keyPrefix';
  const prefix = options[prefixField] ?? 'dlock/';
  if (typeof prefix !== 'string' || prefix.length > 256) {
    throw new InvalidArgumentError(`options.${prefixField}`, 'must be a string of at most 256 characters');
  }
  // A lone surrogate has no UTF-8 form: it is written as U+FFFD, so two such prefixes would name the same keys, and
  // a lock held under one would read as held under the other.
  if (/\p{Cs}/u.test(prefix)) {
    throw new InvalidArgumentError(
      `options.${prefixField}`,
      'must be well-formed Unicode (no lone surrogates)',
    );
  }
  const clock = options['clock'];
  if (
    clock !== undefined &&
    !(isObject(clock) && CLOCK_METHODS.every((m) => typeof clock[m] === 'function'))
  ) {
    throw new InvalidArgumentError('options.clock', `must be a Clock (${CLOCK_METHODS.join(', ')})`);
  }
  const session = options['session'] ?? false;
  let sessionTtlMs: number | undefined;
  if (session === true) sessionTtlMs = 0;
  else if (isObject(session)) {
    rejectUnknownKeys(session, 'options.session', SESSION_KEYS);
    const ttl = session['ttlMs'];
    sessionTtlMs = ttl === undefined ? 0 : positiveInt(ttl, 'options.session.ttlMs', MAX_TIMER_MS);
  } else if (session !== false) {
    throw new InvalidArgumentError('options.session', 'must be a boolean or { ttlMs }');
  }
  const timeout = options['requestTimeoutMs'];
  return {
    client: client as unknown as EtcdClientLike,
    prefix,
    sessionTtlMs,
    requestTimeoutMs:
      timeout === undefined ? 3_000 : positiveInt(timeout, 'options.requestTimeoutMs', 600_000),
    ...(clock === undefined ? {} : { clock: clock as unknown as Clock }),
  };
}
