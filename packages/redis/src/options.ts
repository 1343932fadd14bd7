import { InvalidArgumentError, MAX_TIMER_MS } from '@dlock/core';
import { rejectUnknownKeys } from '@dlock/core/adapter';

/**
 * Constructor-option checks shared by `RedisLockService` and `RedlockService`: both take node-redis clients (see
 * `client-kind.ts`), a per-call bound and a fence retention, and must reject the same bad values with the same
 * messages.
 */

/** Refuses anything but a plain options object, then keys nobody reads (a misspelt key would silently default). */
export function checkOptionsObject(
  value: unknown,
  field: string,
  known: readonly string[],
  needs: string,
): asserts value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(field, `must be an object with ${needs}`);
  }
  rejectUnknownKeys(value, field, known);
}

/** What the services need of an injected clock: the methods they call on it. */
export function checkClock(value: unknown, field: string): void {
  const v = value as Record<string, unknown> | null;
  if (
    typeof v !== 'object' ||
    v === null ||
    !['now', 'monotonic', 'sleep', 'random'].every((m) => typeof v[m] === 'function')
  ) {
    throw new InvalidArgumentError(field, 'must be a Clock (with now, monotonic, sleep and random)');
  }
}

/** A bound on calls in ms, from 1 to the longest timer Node runs; `integer` also refuses fractions. */
export function checkTimeoutMs(value: unknown, field: string, integer: boolean): void {
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
}

/** Both services keep a name's last fencing token this long after its last grant unless told otherwise: 7 days. */
export const DEFAULT_FENCE_RETENTION_MS = 7 * 24 * 3_600_000;

/** How long a name's fencing counter outlives its last grant: whole ms, at least a second. */
export function checkFenceRetentionMs(value: unknown): void {
  if (!(typeof value === 'number' && Number.isSafeInteger(value) && value >= 1_000)) {
    throw new InvalidArgumentError('options.fenceRetentionMs', 'must be an integer of at least 1000');
  }
}
