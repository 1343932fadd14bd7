import type { Clock } from './clock.js';
import { InvalidArgumentError, type LostReason } from './errors.js';
import type { LockHandle } from './handle.js';
import { rejectUnknownKeys, unreadableOptions } from './option-keys.js';
import { MAX_METADATA_BYTES } from './service.js';

/**
 * The largest `ttlMs` and `waitMs` (and `operationTimeoutMs`) accepted, in ms: 2^31 − 1, about 24.8 days. Node timers
 * overflow past it and fire at once.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** The smallest `ttlMs` accepted, in ms. */
export const MIN_TTL_MS = 10;
/** The longest lock or semaphore name accepted, in UTF-8 bytes. */
export const MAX_NAME_BYTES = 1024;

/**
 * The backoff between the attempts of a waiting acquire, for services that answer at once rather than queue (Redlock,
 * `MemoryLockService`'s locks): a random delay below a ceiling that doubles per attempt. When the service reports
 * the holder's expiry, the next attempt is timed by it instead; a release notice wakes the waiter early.
 */
export interface RetryOptions {
  /** First backoff ceiling in ms; it doubles per failed attempt up to `capMs`. Default 50. */
  readonly baseMs?: number;
  /** Largest backoff ceiling in ms. Default 1000. */
  readonly capMs?: number;
}

/** Options of a {@link LockClient}; every one is optional. Unknown keys are refused with `InvalidArgumentError`. */
export interface LockClientOptions {
  /** Where all time comes from. Default `systemClock`; pass a `FakeClock` (`@dlock/testing`) in tests. */
  readonly clock?: Clock;
  /** Identifies this client to the service. Default `host:pid:random`, unique per client. */
  readonly ownerId?: string;
  /** Fraction of the TTL reserved for clock-rate differences between client and service. Default 0.01. */
  readonly driftFactor?: number;
  /**
   * Consecutive renewal transport failures after which a handle is Lost (`unreachable`) even though its validity
   * window is still open. Default: no such limit; failed renewals are retried until the window closes, so a short
   * connection reset does not cost a healthy lock. Set it to give up earlier.
   */
  readonly renewFailBudget?: number;
  /** Backoff between the attempts of a waiting acquire, where the service does not queue. */
  readonly retry?: RetryOptions;
  /** Upper bound, in ms, on any single call to the service; a call that takes longer is a `TransportError`. Default 5000. */
  readonly operationTimeoutMs?: number;
}

/** Options of one `acquire`, `tryAcquire` or `withLock`. Unknown keys are refused with `InvalidArgumentError`. */
export interface AcquireOptions {
  /** Lease length in ms, an integer from 10 to 2^31−1. Only `ttl − drift` of it is treated as usable. */
  readonly ttlMs: number;
  /** How long to wait for a busy lock, in ms. Default 0: one attempt. There is no "forever". */
  readonly waitMs?: number;
  /** Return the already-held handle of this client (and count the nesting) instead of contending. Default false. */
  readonly reentrant?: boolean;
  /** Aborting it gives up the wait; the call rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /** Called once if the lock is lost; exceptions thrown here are caught and reported as `callback-error` events. */
  readonly onLost?: (handle: LockHandle, reason: LostReason) => void;
  /**
   * Keep the lease alive by renewing it. Default true. With `false` the lease is granted once and runs out after
   * `ttlMs` unless released: the handle then ends `lost` with reason `expired`, and `close()` leaves it to run out
   * instead of releasing it — the "at most once per period" pattern (see the README).
   */
  readonly renew?: boolean;
  /**
   * A small string stored with the grant (at most 1,024 UTF-8 bytes), e.g. `host:pid:job`, for whoever inspects the
   * lock. Only on services that can return it (`inspect`); elsewhere the call is refused with `UnsupportedError`.
   */
  readonly metadata?: string;
}

export interface ResolvedClientOptions {
  readonly clock: Clock;
  readonly ownerId: string;
  readonly driftFactor: number;
  readonly renewFailBudget: number;
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
  readonly operationTimeoutMs: number;
}

export interface ResolvedAcquireOptions {
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly reentrant: boolean;
  readonly signal: AbortSignal | undefined;
  readonly onLost: ((handle: LockHandle, reason: LostReason) => void) | undefined;
  readonly renew: boolean;
  readonly metadata: string | undefined;
}

const CLIENT_OPTION_KEYS = [
  'clock',
  'ownerId',
  'driftFactor',
  'renewFailBudget',
  'retry',
  'operationTimeoutMs',
] as const;
const RETRY_OPTION_KEYS = ['baseMs', 'capMs'] as const;
const ACQUIRE_OPTION_KEYS = [
  'ttlMs',
  'waitMs',
  'reentrant',
  'signal',
  'onLost',
  'renew',
  'metadata',
] as const;

const utf8 = new TextEncoder();

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** `problem` may be a function so that messages are only formatted on failure (this runs on every acquire). */
function check(condition: boolean, field: string, problem: string | (() => string)): asserts condition {
  if (!condition) throw new InvalidArgumentError(field, typeof problem === 'string' ? problem : problem());
}

function numberIn(value: unknown, field: string, min: number, max: number, integer: boolean): number {
  check(
    typeof value === 'number' && Number.isFinite(value),
    field,
    () => `must be a finite number, got ${describe(value)}`,
  );
  check(!integer || Number.isInteger(value), field, () => `must be an integer, got ${value}`);
  check(value >= min && value <= max, field, () => `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function optional<T>(value: unknown, fallback: T, parse: (v: unknown) => T): T {
  return value === undefined ? fallback : parse(value);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return `string ${JSON.stringify(value.slice(0, 40))}`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return `${typeof value} ${value}`;
  return typeof value;
}

/**
 * Checks a lock or semaphore name as the client does and returns it: a non-empty, well-formed (no lone surrogates)
 * string of at most {@link MAX_NAME_BYTES} UTF-8 bytes. Any content is allowed; adapters encode it. Throws
 * `InvalidArgumentError` naming `field` otherwise.
 */
export function validateName(name: unknown, field = 'name'): string {
  check(typeof name === 'string', field, () => `must be a string, got ${describe(name)}`);
  check(name.length > 0, field, 'must not be empty');
  // A lone surrogate has no UTF-8 form: encoders replace it with U+FFFD, so two different names would map to one key.
  check(!/\p{Cs}/u.test(name), field, 'must be well-formed Unicode (no lone surrogates)');
  // A UTF-16 code unit takes at most 3 UTF-8 bytes: short names need no encoding to be known small enough.
  const bytes = name.length * 3 <= MAX_NAME_BYTES ? name.length : utf8.encode(name).length;
  check(bytes <= MAX_NAME_BYTES, field, () => `must be at most ${MAX_NAME_BYTES} UTF-8 bytes, got ${bytes}`);
  return name;
}

/** The most UTF-16 code units an owner id may have. */
const MAX_OWNER_ID_LENGTH = 256;

/**
 * Checks an owner id as the client does and returns it: a string of 1 to 256 UTF-16 code
 * units with no lone surrogate. Throws `InvalidArgumentError` naming `field` otherwise. A backend called directly
 * checks `request.ownerId` with this, so that every backend accepts exactly the owner ids `LockClient` does.
 */
export function validateOwnerId(ownerId: unknown, field: string): string {
  check(typeof ownerId === 'string', field, () => `must be a string, got ${describe(ownerId)}`);
  check(
    ownerId.length > 0 && ownerId.length <= MAX_OWNER_ID_LENGTH,
    field,
    () => `must be 1 to ${MAX_OWNER_ID_LENGTH} UTF-16 code units long, got ${ownerId.length}`,
  );
  // A lone surrogate has no UTF-8 form: stored, it comes back as U+FFFD, an owner id nobody has.
  check(!/\p{Cs}/u.test(ownerId), field, 'must be well-formed Unicode (no lone surrogates)');
  return ownerId;
}

function validateClock(value: unknown): Clock {
  check(isObject(value), 'options.clock', 'must be a Clock object');
  for (const fn of ['now', 'monotonic', 'sleep', 'random']) {
    check(typeof value[fn] === 'function', `options.clock.${fn}`, 'must be a function');
  }
  return value as unknown as Clock;
}

function readClientOptions(
  options: unknown,
  defaults: { clock: Clock; ownerId: () => string },
): ResolvedClientOptions {
  const o = optional(options, {}, (v) => {
    check(isObject(v), 'options', () => `must be an object, got ${describe(v)}`);
    rejectUnknownKeys(v, 'options', CLIENT_OPTION_KEYS);
    return v;
  }) as Record<string, unknown>;
  const retry = optional(o['retry'], {}, (v) => {
    check(isObject(v), 'options.retry', () => `must be an object, got ${describe(v)}`);
    rejectUnknownKeys(v, 'options.retry', RETRY_OPTION_KEYS);
    return v;
  }) as Record<string, unknown>;
  const retryBaseMs = optional(retry['baseMs'], 50, (v) =>
    numberIn(v, 'options.retry.baseMs', 1, MAX_TIMER_MS, false),
  );
  const retryCapMs = optional(retry['capMs'], Math.max(1000, retryBaseMs), (v) =>
    numberIn(v, 'options.retry.capMs', retryBaseMs, MAX_TIMER_MS, false),
  );
  return {
    clock: optional(o['clock'], defaults.clock, validateClock),
    ownerId:
      optional(o['ownerId'], undefined, (v) => validateOwnerId(v, 'options.ownerId')) ?? defaults.ownerId(),
    // Above 0.5 more than half of every lease would be thrown away: almost certainly a unit mistake.
    driftFactor: optional(o['driftFactor'], 0.01, (v) => numberIn(v, 'options.driftFactor', 0, 0.5, false)),
    renewFailBudget: optional(o['renewFailBudget'], Number.POSITIVE_INFINITY, (v) =>
      numberIn(v, 'options.renewFailBudget', 1, 1000, true),
    ),
    retryBaseMs,
    retryCapMs,
    operationTimeoutMs: optional(o['operationTimeoutMs'], 5000, (v) =>
      numberIn(v, 'options.operationTimeoutMs', 1, MAX_TIMER_MS, true),
    ),
  };
}

export function resolveClientOptions(
  options: unknown,
  defaults: { clock: Clock; ownerId: () => string },
): ResolvedClientOptions {
  try {
    return readClientOptions(options, defaults);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

function readAcquireOptions(options: unknown): ResolvedAcquireOptions {
  check(
    isObject(options),
    'options',
    () => `must be an object with at least ttlMs, got ${describe(options)}`,
  );
  rejectUnknownKeys(options, 'options', ACQUIRE_OPTION_KEYS);
  const signal = options['signal'];
  check(signal === undefined || signal instanceof AbortSignal, 'options.signal', 'must be an AbortSignal');
  const onLost = options['onLost'];
  check(onLost === undefined || typeof onLost === 'function', 'options.onLost', 'must be a function');
  const reentrant = options['reentrant'];
  check(reentrant === undefined || typeof reentrant === 'boolean', 'options.reentrant', 'must be a boolean');
  const renew = options['renew'];
  check(renew === undefined || typeof renew === 'boolean', 'options.renew', 'must be a boolean');
  const metadata =
    options['metadata'] === undefined ? undefined : validateMetadata(options['metadata'], 'options.metadata');
  return {
    ttlMs: numberIn(options['ttlMs'], 'options.ttlMs', MIN_TTL_MS, MAX_TIMER_MS, true),
    waitMs: optional(options['waitMs'], 0, (v) => numberIn(v, 'options.waitMs', 0, MAX_TIMER_MS, false)),
    reentrant: reentrant ?? false,
    signal,
    onLost: onLost as ResolvedAcquireOptions['onLost'],
    renew: renew ?? true,
    metadata,
  };
}

export function resolveAcquireOptions(options: unknown): ResolvedAcquireOptions {
  try {
    return readAcquireOptions(options);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

/** Metadata stored with a grant, or an election's value: a well-formed string of at most 1,024 UTF-8 bytes. */
export function validateMetadata(value: unknown, field: string): string {
  check(typeof value === 'string', field, () => `must be a string, got ${describe(value)}`);
  check(!/\p{Cs}/u.test(value), field, 'must be well-formed Unicode (no lone surrogates)');
  const bytes = value.length * 3 <= MAX_METADATA_BYTES ? value.length : utf8.encode(value).length;
  check(
    bytes <= MAX_METADATA_BYTES,
    field,
    () => `must be at most ${MAX_METADATA_BYTES} UTF-8 bytes, got ${bytes}`,
  );
  return value;
}

export function validateCallback(value: unknown, field: string): () => void {
  check(typeof value === 'function', field, () => `must be a function, got ${describe(value)}`);
  return value as () => void;
}
