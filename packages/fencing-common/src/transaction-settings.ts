import { InvalidArgumentError } from './errors.js';

/** Isolation levels a gate can open its transaction with; every dialect names them alike. */
export type IsolationLevel = 'read committed' | 'repeatable read' | 'serializable';

/** Every value `parseIsolationLevel` accepts, weakest first. Frozen. */
export const ISOLATION_LEVELS: readonly IsolationLevel[] = Object.freeze([
  'read committed',
  'repeatable read',
  'serializable',
]);

/** The largest `lock_timeout` PostgreSQL accepts: a 32-bit signed count of milliseconds. */
const MAX_LOCK_TIMEOUT_MS = 2_147_483_647;

/**
 * Checks an `isolationLevel` option; `undefined` means "not set". Compared against the list, so inherited names
 * such as `toString` are refused rather than looked up.
 */
export function parseIsolationLevel(
  value: unknown,
  field = 'options.isolationLevel',
): IsolationLevel | undefined {
  if (value === undefined) return undefined;
  if (!(ISOLATION_LEVELS as readonly unknown[]).includes(value)) {
    throw new InvalidArgumentError(field, `must be one of ${ISOLATION_LEVELS.join(', ')}`);
  }
  return value as IsolationLevel;
}

/**
 * Checks a `lockTimeoutMs` option: an integer in 1..2147483647, or `undefined` for "not set". The value ends up
 * in SQL text (`SET` takes no bind parameters), so nothing but a safe integer may pass.
 */
export function parseLockTimeoutMs(value: unknown, field = 'options.lockTimeoutMs'): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || (value as number) < 1 || (value as number) > MAX_LOCK_TIMEOUT_MS) {
    throw new InvalidArgumentError(field, `must be an integer in 1..${MAX_LOCK_TIMEOUT_MS}`);
  }
  return value as number;
}
