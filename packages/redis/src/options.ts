import { type Clock, InvalidArgumentError, MAX_TIMER_MS, systemClock } from '@dlock/core';
import { rejectUnknownKeys } from '@dlock/core/adapter';
import type { RedisClientLike, RedisSubscriberLike, RedlockClientLike } from './client-like.js';
import type { RedisConnection, RedisSubscription } from './clients/connection.js';
import { connectionOf, subscriptionOf } from './clients/detect.js';
import { DEFAULT_KEY_PREFIX, DEFAULT_REDLOCK_PREFIX, validateKeyPrefix } from './keys.js';

// The options of both services, checked at construction before any I/O: both take Redis clients of the supported
// families (see `clients/detect.ts`), a key prefix, a bound on each request, a fence retention and a clock, under the
// names every dlock adapter uses, and must reject the same bad values with the same messages.

/**
 * Options of {@link RedisLockService}, checked when it is constructed: a bad value or an unknown key throws
 * `InvalidArgumentError` before any I/O.
 */
export interface RedisLockServiceOptions {
  /**
   * A connected client: node-redis 5 or 6 (`createClient`, or `createCluster` for a Redis Cluster) or ioredis 5 or 6
   * (`new Redis(...)` or `new Cluster(...)`), in RESP2 or RESP3. The caller owns and closes it.
   */
  readonly client: RedisClientLike;
  /**
   * A connection for pub/sub, of the same kind as `client`. Default: `client.duplicate()` (with sharded subscribers
   * on an ioredis Cluster), which the service connects, owns and closes in `close()`. A subscriber you pass must be
   * connected by you; the service only subscribes it (on a cluster, to sharded channels).
   */
  readonly subscriber?: RedisSubscriberLike;
  /** Prefix of every key and channel, without `{` or `}`. Default `"dlock:"`. */
  readonly keyPrefix?: string;
  /**
   * Bound on each Redis call the service makes, in ms (node-redis does not time out a command already written).
   * A call that takes longer fails with a `TransportError`. Default 5000.
   */
  readonly requestTimeoutMs?: number;
  /** @deprecated Use `requestTimeoutMs` (the same option under the name every adapter uses). Accepted until 1.0. */
  readonly commandTimeoutMs?: number;
  /**
   * How long a name's last fencing token is kept after its last grant, in ms. Default 7 days. Tokens are
   * max(last + 1, Redis server clock in µs), so once the record is gone (retention over, or Redis lost its data)
   * the next token still exceeds every earlier one unless the server clock stepped back by more than the time
   * since the name's last grant. Without a retention a key would stay for every name ever locked.
   */
  readonly fenceRetentionMs?: number;
  /** Where the service reads time and sleeps (call bounds, waits, clean-ups). Default `systemClock`. */
  readonly clock?: Clock;
}

/**
 * Options of {@link RedlockService}, checked when it is constructed: a bad value or an unknown key throws
 * `InvalidArgumentError` before any I/O.
 */
export interface RedlockServiceOptions {
  /**
   * Connected clients, one per independent Redis node (not replicas of each other, not one cluster): node-redis 5
   * or 6 (`createClient`) or ioredis 5 or 6 (`new Redis(...)`), in any mix.
   * An odd number, 3 or 5, is usual: a lock needs a majority, `floor(N / 2) + 1`, of them.
   */
  readonly clients: readonly RedlockClientLike[];
  /** Prefix of every key and channel. Default `dlock:redlock:`. Must not contain `{` or `}`. */
  readonly keyPrefix?: string;
  /**
   * Bound, in ms, on each round of requests to the nodes (acquire takes two rounds). A node that has not answered
   * by then counts as failed for that round. Keep it well below the TTLs you use. Default 250.
   */
  readonly requestTimeoutMs?: number;
  /** @deprecated Use `requestTimeoutMs` (the same option under the name every adapter uses). Accepted until 1.0. */
  readonly nodeTimeoutMs?: number;
  /**
   * How long each node keeps a name's fencing counter after its last grant or renewal, in ms. Default 7 days. A
   * counter that is gone (expired, or lost in a restart) is reseeded from that node's clock; see the README.
   */
  readonly fenceRetentionMs?: number;
  /** Where the service reads time and sleeps (round deadlines, wake-up jitter). Default `systemClock`. */
  readonly clock?: Clock;
}

/** Both services keep a name's last fencing token this long after its last grant unless told otherwise: 7 days. */
export const DEFAULT_FENCE_RETENTION_MS = 7 * 24 * 3_600_000;

export interface ResolvedRedisOptions {
  readonly client: RedisConnection;
  readonly subscriber: RedisSubscription | undefined;
  readonly keyPrefix: string;
  readonly requestTimeoutMs: number;
  readonly fenceRetentionMs: number;
  readonly clock: Clock;
}

export interface ResolvedRedlockOptions {
  readonly clients: readonly RedisConnection[];
  readonly keyPrefix: string;
  readonly requestTimeoutMs: number;
  readonly fenceRetentionMs: number;
  readonly clock: Clock;
}

const REDIS_KEYS = [
  'client',
  'subscriber',
  'keyPrefix',
  'requestTimeoutMs',
  'commandTimeoutMs',
  'fenceRetentionMs',
  'clock',
] as const;

const REDLOCK_KEYS = [
  'clients',
  'keyPrefix',
  'requestTimeoutMs',
  'nodeTimeoutMs',
  'fenceRetentionMs',
  'clock',
] as const;

export function resolveRedisOptions(options: unknown): ResolvedRedisOptions {
  const o = checkOptionsObject(options, REDIS_KEYS, 'a connected Redis `client`');
  const clock = clockOf(o['clock']);
  const client = connectionOf(o['client'], 'options.client', { allowCluster: true, clock });
  const subscriber = o['subscriber'];
  if (subscriber !== undefined && subscriber === o['client']) {
    throw new InvalidArgumentError('options.subscriber', 'must be a separate connection from options.client');
  }
  return {
    client,
    subscriber:
      subscriber === undefined ? undefined : subscriptionOf(subscriber, 'options.subscriber', client),
    keyPrefix: o['keyPrefix'] === undefined ? DEFAULT_KEY_PREFIX : validateKeyPrefix(o['keyPrefix']),
    // The old name took fractions of a millisecond; it still does.
    requestTimeoutMs: requestTimeout(o, 'commandTimeoutMs', false) ?? 5_000,
    fenceRetentionMs: fenceRetention(o['fenceRetentionMs']),
    clock,
  };
}

export function resolveRedlockOptions(options: unknown): ResolvedRedlockOptions {
  const o = checkOptionsObject(options, REDLOCK_KEYS, '`clients`');
  const clients = o['clients'];
  if (!Array.isArray(clients) || clients.length === 0) {
    throw new InvalidArgumentError('options.clients', 'must be a non-empty array of Redis clients');
  }
  const clock = clockOf(o['clock']);
  const connections = clients.map((client: unknown, i) =>
    connectionOf(client, `options.clients[${i}]`, { allowCluster: false, clock }),
  );
  // One node counted twice would let a single Redis make up a "majority".
  if (new Set(clients).size !== clients.length) {
    throw new InvalidArgumentError('options.clients', 'must not contain the same client twice');
  }
  return {
    clients: connections,
    keyPrefix: o['keyPrefix'] === undefined ? DEFAULT_REDLOCK_PREFIX : validateKeyPrefix(o['keyPrefix']),
    requestTimeoutMs: requestTimeout(o, 'nodeTimeoutMs', true) ?? 250,
    fenceRetentionMs: fenceRetention(o['fenceRetentionMs']),
    clock,
  };
}

/** Refuses anything but a plain options object, then keys nobody reads (a misspelt key would silently default). */
function checkOptionsObject(
  value: unknown,
  known: readonly string[],
  needs: string,
): Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError('options', `must be an object with ${needs}`);
  }
  rejectUnknownKeys(value, 'options', known);
  return value as Readonly<Record<string, unknown>>;
}

/**
 * `requestTimeoutMs`, or the service's deprecated name for it (its old rule kept: `integer` or not); both at once
 * is refused rather than one silently winning. Whole ms from 1 to the longest timer Node runs.
 */
function requestTimeout(
  o: Readonly<Record<string, unknown>>,
  alias: 'commandTimeoutMs' | 'nodeTimeoutMs',
  aliasInteger: boolean,
): number | undefined {
  if (o['requestTimeoutMs'] !== undefined && o[alias] !== undefined) {
    throw new InvalidArgumentError(
      `options.${alias}`,
      'is the deprecated name of requestTimeoutMs: give only requestTimeoutMs',
    );
  }
  if (o[alias] !== undefined) return checkTimeoutMs(o[alias], `options.${alias}`, aliasInteger);
  if (o['requestTimeoutMs'] !== undefined)
    return checkTimeoutMs(o['requestTimeoutMs'], 'options.requestTimeoutMs', true);
  return undefined;
}

function checkTimeoutMs(value: unknown, field: string, integer: boolean): number {
  if (
    typeof value !== 'number' ||
    !(value >= 1 && value <= MAX_TIMER_MS) ||
    (integer && !Number.isInteger(value))
  ) {
    throw new InvalidArgumentError(
      field,
      `must be ${integer ? 'an integer' : 'a number'} from 1 to ${MAX_TIMER_MS}`,
    );
  }
  return value;
}

/** How long a name's fencing counter outlives its last grant: whole ms, at least a second. */
function fenceRetention(value: unknown): number {
  if (value === undefined) return DEFAULT_FENCE_RETENTION_MS;
  if (!(typeof value === 'number' && Number.isSafeInteger(value) && value >= 1_000)) {
    throw new InvalidArgumentError('options.fenceRetentionMs', 'must be an integer of at least 1000');
  }
  return value;
}

/** What the services need of an injected clock: the methods they call on it. */
function clockOf(value: unknown): Clock {
  if (value === undefined) return systemClock;
  const v = value as Record<string, unknown> | null;
  if (
    typeof v !== 'object' ||
    v === null ||
    !['now', 'monotonic', 'sleep', 'random'].every((m) => typeof v[m] === 'function')
  ) {
    throw new InvalidArgumentError(
      'options.clock',
      'must be a Clock (with now, monotonic, sleep and random)',
    );
  }
  return value as Clock;
}
