import { InvalidArgumentError, isDLockError } from './errors.js';
import { rejectUnknownKeys } from './option-keys.js';

const RETRY_OPTION_KEYS: readonly string[] = ['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'signal'];

/** Bounds for {@link withFenceRetry}. */
export interface FenceRetryOptions {
  /** Total attempts including the first; default 5. */
  readonly maxAttempts?: number;
  /** First backoff ceiling in ms; doubles per attempt up to `maxDelayMs`. Default 10. */
  readonly baseDelayMs?: number;
  /** Backoff ceiling in ms; default 250. */
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
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new InvalidArgumentError('options.maxAttempts', 'must be a positive integer');
  }
  // typeof first: a bigint or a numeric string compares fine here and then breaks (or coerces) in the backoff.
  if (!isDelay(baseDelayMs) || !isDelay(maxDelayMs)) {
    throw new InvalidArgumentError('options.baseDelayMs', 'and options.maxDelayMs must be >= 0');
  }
  if (options.signal !== undefined && !isAbortSignalLike(options.signal)) {
    // Checked now: anything else would first be used in a backoff, where a timer already set throws on it.
    throw new InvalidArgumentError('options.signal', 'must be an AbortSignal');
  }
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (error) {
      // Checked by brand, not instanceof, so errors from a second installed copy of a gate are retried too.
      const retryable = isDLockError(error) && (error as { retryable?: unknown }).retryable === true;
      if (!retryable || n >= maxAttempts || options.signal?.aborted) throw error;
      // Full jitter spreads writers that collided at the same instant apart; without it they collide again.
      const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (n - 1));
      await delay(Math.random() * ceiling, options.signal);
      if (options.signal?.aborted) throw error;
    }
  }
}

function isDelay(ms: unknown): boolean {
  return typeof ms === 'number' && ms >= 0;
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

function delay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
