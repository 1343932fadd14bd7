/**
 * The errors every fencing gate throws. Match on `code` (stable), never on messages.
 *
 * The `Symbol.for('dlock.error')` brand is the same one `@dlock/core` uses, so `isDLockError` from either package
 * recognises errors from the other, and from duplicated installs, without these packages depending on core.
 */
const BRAND = Symbol.for('dlock.error');

/**
 * A value as message text. Building an error must never throw in turn: a Symbol or a null-prototype object
 * interpolated into a template would, with a TypeError that hides the error being reported.
 */
function text(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint' || typeof value === 'number' || typeof value === 'boolean')
    return String(value);
  return `(${value === null ? 'null' : typeof value})`;
}

/** Every `code` a fencing gate can put on an error. */
export type FencingErrorCode =
  | 'STALE_FENCING_TOKEN'
  | 'INVALID_ARGUMENT'
  | 'FENCE_CONFLICT'
  | 'FENCE_BUSY'
  | 'FENCE_BROKEN';

/**
 * Base class of the fencing errors.
 *
 * `retryable` is true when running the whole transaction again (with a fresh token read from the same lock) can
 * succeed; a stale token or a bad argument never becomes valid by retrying.
 */
export abstract class FencingError extends Error {
  /** Which failure this is; stable across releases, unlike the message. */
  abstract readonly code: FencingErrorCode;
  /** True when running the whole transaction again, with a fresh token from the same lock, can succeed. */
  abstract readonly retryable: boolean;
  /** The `Symbol.for('dlock.error')` brand that {@link isDLockError} checks; always `true`. */
  readonly [BRAND] = true;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * True for any dlock error (core or fencing), including those thrown by another installed copy of a dlock package.
 *
 * @example
 * ```ts
 * try { await gate.runFenced(pool, 'orders/42', token, write); }
 * catch (e) { if (isDLockError(e) && e.code === 'STALE_FENCING_TOKEN') return; throw e; }
 * ```
 */
export function isDLockError(value: unknown): value is Error & {
  /** The error's stable code, e.g. `STALE_FENCING_TOKEN` or core's `ACQUIRE_TIMEOUT`. */
  readonly code: string;
} {
  if (typeof value !== 'object' || value === null) return false;
  try {
    return (value as { [BRAND]?: unknown })[BRAND] === true;
  } catch {
    // A revoked Proxy, or one whose trap throws: a predicate must not turn what was thrown into its own TypeError.
    return false;
  }
}

/**
 * The token is lower than the resource's high-water mark: a newer lock holder has already written. The write was
 * not applied and the transaction was (or, inside your own transaction, must be) rolled back. Never retry with the
 * same token; the lock this token came from is lost.
 */
export class StaleFencingTokenError extends FencingError {
  readonly code = 'STALE_FENCING_TOKEN';
  readonly retryable = false;
  constructor(
    /** The resource the write was fenced on. */
    readonly resource: string,
    /** The token that was refused. */
    readonly token: bigint,
    /** The stored mark that beat `token`; always greater than `token`. */
    readonly highWaterMark: bigint,
  ) {
    super(
      `fencing token ${text(token)} for "${text(resource)}" is stale: the high-water mark is ${text(highWaterMark)}`,
    );
  }
}

/** A public call received a value of the wrong type or range. Thrown before any SQL is sent. */
export class InvalidArgumentError extends FencingError {
  readonly code = 'INVALID_ARGUMENT';
  readonly retryable = false;
  constructor(
    /** Name of the offending argument or option, e.g. `token` or `options.table`. */
    readonly field: string,
    problem: string,
  ) {
    // A caller's helper may pass anything as the name (a Symbol, an object without toString); reporting the
    // mistake must not itself fail with a TypeError.
    const name = typeof field === 'string' ? field : `(${typeof field})`;
    super(`${name} ${typeof problem === 'string' ? problem : 'is invalid'}`);
    this.field = name;
  }
}

/**
 * The database aborted the transaction to keep it serializable: SQLSTATE 40001 (serialization failure) or 40P01
 * (deadlock) on PostgreSQL, 1213 (deadlock) on MySQL/MariaDB, `SQLITE_BUSY*` on SQLite. Nothing was committed.
 * Retry the whole transaction, not just the gate: see `withFenceRetry`.
 */
export class FenceConflictError extends FencingError {
  readonly code = 'FENCE_CONFLICT';
  readonly retryable = true;
  constructor(
    /** The resource the aborted transaction was fenced on. */
    readonly resource: string,
    cause: unknown,
  ) {
    super(`transaction fenced on "${text(resource)}" was aborted by a concurrent transaction; retry it`, {
      cause,
    });
  }
}

/**
 * The gate gave up waiting for the fence row because another transaction held it longer than the configured bound
 * (SQLSTATE 55P03 from `lock_timeout` on PostgreSQL, 1205 on MySQL/MariaDB). Nothing was committed.
 */
export class FenceBusyError extends FencingError {
  readonly code = 'FENCE_BUSY';
  readonly retryable = true;
  constructor(
    /** The resource whose fence row stayed locked. */
    readonly resource: string,
    cause: unknown,
  ) {
    super(`fence row for "${text(resource)}" stayed locked by another transaction past the wait bound`, {
      cause,
    });
  }
}

/**
 * Why a {@link FenceBrokenError} was thrown:
 * - `'transaction-ended'`: the callback ended the fenced transaction itself (COMMIT, ROLLBACK, or on MySQL a
 *   statement that commits implicitly, such as DDL), so what it ran afterwards was not fenced.
 * - `'rolled-back'`: the database rolled the fenced transaction back instead of committing it, because a statement
 *   in the callback failed and the callback went on.
 * - `'row-vanished'`: the fence row the guard had just locked could not be read back, so the gate cannot judge the
 *   token (the fence table was altered or replaced behind the gate).
 */
export type FenceBrokenReason = 'transaction-ended' | 'rolled-back' | 'row-vanished';

/**
 * The gate could not keep its promise for this call, so it refuses to report success. Whatever was still open of
 * the transaction was rolled back; anything the callback itself committed before that (by ending the transaction
 * on its own) stays committed and was not fenced. Not retryable: running the same callback again would do the same.
 */
export class FenceBrokenError extends FencingError {
  readonly code = 'FENCE_BROKEN';
  readonly retryable = false;
  constructor(
    /** The resource the call was fenced on. */
    readonly resource: string,
    /** Which promise broke; see {@link FenceBrokenReason}. */
    readonly reason: FenceBrokenReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(text(message), options);
  }
}

/**
 * A driver's {@link FenceBrokenError} for a callback that ended the transaction the gate opened (`how`: the ways it
 * can end on that driver): what ran after that was not fenced, and the gate rolled back what was still open.
 */
export function transactionEndedError(resource: string, how: string, cause?: unknown): FenceBrokenError {
  return new FenceBrokenError(
    resource,
    'transaction-ended',
    `the callback ended the transaction fenced on "${resource}" itself (${how}): what ran after that was not ` +
      'fenced, so the gate rolled back what was still open instead of committing',
    cause === undefined ? undefined : { cause },
  );
}

/** A driver's {@link FenceBrokenError} for a callback that went on after a failed statement: nothing was committed. */
export function rolledBackError(resource: string, cause?: unknown): FenceBrokenError {
  return new FenceBrokenError(
    resource,
    'rolled-back',
    `transaction fenced on "${resource}" was rolled back: a statement in the callback failed and the callback ` +
      'went on, so nothing was committed',
    cause === undefined ? undefined : { cause },
  );
}
