import { InvalidArgumentError } from '../errors.js';
import { rejectUnknownKeys, unreadableOptions } from '../option-keys.js';
import { MAX_TIMER_MS, MIN_TTL_MS, type ResolvedAcquireOptions, resolveAcquireOptions } from '../options.js';
import { MAX_PERMITS } from '../service.js';
import type { PermitOptions, SemaphoreOptions } from './semaphore.js';

const SEMAPHORE_KEYS = ['permits', 'ttlMs'] as const;
// A permit is never reentrant (each acquire is one more slot) and takes its TTL from the semaphore.
const PERMIT_KEYS = ['waitMs', 'signal', 'onLost', 'renew', 'metadata'] as const;
const TRY_PERMIT_KEYS = ['signal', 'onLost', 'renew', 'metadata'] as const;

export interface ResolvedSemaphoreOptions {
  readonly permits: number;
  readonly ttlMs: number;
}

/**
 * A semaphore's limit: an integer from 1 to {@link MAX_PERMITS}. Core checks it before a call reaches a service; a
 * service checks a direct caller's with this too, so both say the same.
 *
 * @throws InvalidArgumentError naming `field`.
 */
export function validatePermits(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_PERMITS) {
    throw new InvalidArgumentError(field, `must be an integer from 1 to ${MAX_PERMITS}`);
  }
  return value;
}

function readSemaphoreOptions(options: unknown): ResolvedSemaphoreOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new InvalidArgumentError('options', 'must be an object with permits and ttlMs');
  }
  const o = options as Readonly<Record<string, unknown>>;
  rejectUnknownKeys(o, 'options', SEMAPHORE_KEYS);
  const permits = validatePermits(o['permits'], 'options.permits');
  const ttlMs = o['ttlMs'];
  if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < MIN_TTL_MS || ttlMs > MAX_TIMER_MS) {
    throw new InvalidArgumentError(
      'options.ttlMs',
      `must be an integer from ${MIN_TTL_MS} to ${MAX_TIMER_MS}`,
    );
  }
  return { permits, ttlMs };
}

export function resolveSemaphoreOptions(options: unknown): ResolvedSemaphoreOptions {
  try {
    return readSemaphoreOptions(options);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

/** `tryAcquire` takes no `waitMs`: it never queues. */
function readPermitOptions(
  options: PermitOptions | undefined,
  ttlMs: number,
  tryOnce: boolean,
): ResolvedAcquireOptions {
  const given: unknown = options ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  const o = given as Readonly<Record<string, unknown>>;
  rejectUnknownKeys(o, 'options', tryOnce ? TRY_PERMIT_KEYS : PERMIT_KEYS);
  return resolveAcquireOptions({ ...o, ttlMs });
}

export function resolvePermitOptions(
  options: PermitOptions | undefined,
  ttlMs: number,
  tryOnce: boolean,
): ResolvedAcquireOptions {
  try {
    return readPermitOptions(options, ttlMs, tryOnce);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

export type { SemaphoreOptions };
