import { InvalidArgumentError, isDLockError } from './errors.js';
import { rejectUnknownKeys } from './option-keys.js';
import { describeValue } from './validate.js';

const RETRY_OPTION_KEYS: readonly string[] = ['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'signal'];

/** Bounds for {@link withFenceRetry}. */
export interface FenceRetryOptions {
  /** Total attempts including the first, a positive integer; default 5. */
  readonly maxAttempts?: number;
  /** First backoff ceiling in ms (0..2147483647); doubles per attempt up to `maxDelayMs`. Default 10. */
  readonly baseDelayMs?: number;
  /** Backoff ceiling in ms (0..2147483647, the longest a timer holds); default 250. */
  readonly maxDelayMs?: number;
  /** Stops waiting between attempts; the last error is rethrown. */
  readonly signal?: AbortSignal;
}

/**
 * Runs `attempt` again when it fails with a retryable fencing error ({@link FenceConflictError} or
 * {@link FenceBusyError}), with full-jitter exponential backoff, at most `maxAttempts` times.
 *
 * Pass the whole transaction (for example `() => gate.runFenced(...)`), never just the gate statement: after a
 * serialization failure the database has aborted the transaction, so only a fresh one can succeed. Every other
 * error, a stale token included, is rethrown at once.
 *
 * @example
 * ```ts
 * await withFenceRetry(() => gate.runFenced(pool, 'orders/42', lock.fencingToken, write, { isolationLevel: 'serializable' }));
 * ```
 */
export async function withFenceRetry<T>(
  attempt: (attemptNumber: number) => Promise<T>,
  options: FenceRetryOptions = {},
): Promise<T> {
  if (typeof attempt !== 'function') throw new InvalidArgumentError('attempt', 'must be a function');
  rejectUnknownKeys(options, 'options', RETRY_OPTION_KEYS);
  const maxAttempts = options.maxAttempts ?? 5;
  const baseDelayMs = options.baseDelayMs ?? 10;
  const maxDelayMs = options.maxDelayMs ?? 250;
  const signal = options.signal;
  if (typeof maxAttempts !== 'number' || !Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new InvalidArgumentError(
      'options.maxAttempts',
      `must be a positive integer (got ${describeBound(maxAttempts)})`,
    );
  }
  // typeof first: a bigint or a numeric string compares fine here and then breaks (or coerces) in the backoff.
  assertDelay(baseDelayMs, 'options.baseDelayMs');
  assertDelay(maxDelayMs, 'options.maxDelayMs');
  if (signal !== undefined && !isAbortSignalLike(signal)) {
    // Checked now: anything else would first be used in a backoff, where a timer already set throws on it.
    throw new InvalidArgumentError('options.signal', 'must be an AbortSignal');
  }
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (error) {
      // Checked by brand, not instanceof, so errors from a second installed copy of a gate are retried too.
      if (!isRetryable(error) || n >= maxAttempts || signal?.aborted) throw error;
      // Full jitter spreads writers that collided at the same instant apart; without it they collide again. The
      // power stops at 2^1023, the largest finite one: 2^1024 is Infinity, and 0 * Infinity is NaN, which a timer
      // takes as 1 ms.
      const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(n - 1, 1023));
      await delay(Math.random() * ceiling, signal);
      if (signal?.aborted) throw error;
    }
  }
}

/** A retryable dlock error; false for anything it cannot read (a revoked Proxy), which is then rethrown as it is. */
function isRetryable(error: unknown): boolean {
  try {
    return isDLockError(error) && (error as { retryable?: unknown }).retryable === true;
  } catch {
    return false;
  }
}

/** The longest delay a Node or browser timer holds; above it the timer fires after 1 ms instead. */
const MAX_TIMER_MS = 2_147_483_647;

function assertDelay(ms: unknown, field: string): void {
  if (typeof ms !== 'number' || !(ms >= 0 && ms <= MAX_TIMER_MS)) {
    throw new InvalidArgumentError(
      field,
      `must be a number of ms in 0..${MAX_TIMER_MS} (got ${describeBound(ms)})`,
    );
  }
}

/** A wrong bound as message text: numbers as they are (NaN, Infinity, -1), anything else by its type. */
function describeBound(value: unknown): string {
  return typeof value === 'number' ? String(value) : describeValue(value);
}

/** Duck-typed rather than `instanceof`, so signals from another realm or a polyfill pass. */
function isAbortSignalLike(value: unknown): value is AbortSignal {
  if (typeof value !== 'object' || value === null) return false;
  const signal = value as Partial<Record<'aborted' | 'addEventListener' | 'removeEventListener', unknown>>;
  return (
    typeof signal.aborted === 'boolean' &&
    typeof signal.addEventListener === 'function' &&
    typeof signal.removeEventListener === 'function'
  );
}

/**
 * Waits `ms`, or less when `signal` aborts. A signal-like object's listener methods may throw (a real AbortSignal's
 * do not): thrown in the timer's callback it would be an uncaught exception, and thrown here it would replace the
 * attempt's error. Unable to listen, the wait simply runs its bounded course; the caller checks `aborted` after.
 */
function delay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      try {
        signal?.removeEventListener('abort', done);
      } catch {
        // The wait is over either way; a listener left on the signal only calls done() again, a no-op.
      }
      resolve();
    };
    const timer = setTimeout(done, ms);
    try {
      signal?.addEventListener('abort', done, { once: true });
    } catch {
      // Not listening: the timer alone ends the wait.
    }
  });
}
