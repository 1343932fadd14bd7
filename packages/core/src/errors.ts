/**
 * One small error hierarchy. Every error carries a stable `code`; match on it, never on messages.
 * The `Symbol.for('dlock.error')` brand lets {@link isDLockError} recognise errors from another copy of this package
 * (duplicated installs) and from the fencing packages, which do not depend on core.
 */
const BRAND = Symbol.for('dlock.error');

export type DLockErrorCode =
  | 'INVALID_ARGUMENT'
  | 'ACQUIRE_TIMEOUT'
  | 'LOCK_LOST'
  | 'LOCK_RELEASED'
  | 'TRANSPORT'
  | 'CLIENT_CLOSED';

export abstract class DLockError extends Error {
  abstract readonly code: DLockErrorCode;
  readonly [BRAND] = true;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** True for any dlock error, including those thrown by another installed copy of a dlock package. */
export function isDLockError(value: unknown): value is Error & { readonly code: string } {
  return typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;
}

/** A public call received a value of the wrong type or range. Thrown before any network call. */
export class InvalidArgumentError extends DLockError {
  readonly code = 'INVALID_ARGUMENT';
  constructor(
    /** Dotted path of the offending field, e.g. `options.ttlMs`. */
    readonly field: string,
    problem: string,
  ) {
    super(`${field} ${problem}`);
  }
}

/** The wait budget ran out while another owner held the lock. */
export class AcquireTimeoutError extends DLockError {
  readonly code = 'ACQUIRE_TIMEOUT';
  constructor(
    readonly lockName: string,
    readonly waitedMs: number,
    readonly attempts: number,
  ) {
    super(
      `lock "${lockName}" is held by another owner; gave up after ${Math.round(waitedMs)} ms and ${attempts} attempt(s)`,
    );
  }
}

/** Why a handle left the held state without being released. */
export type LostReason =
  /** The local validity deadline passed before a renewal could extend it (a pause, or renewals too slow). */
  | 'expired'
  /** The service answered that this grant no longer owns the lock. */
  | 'rejected'
  /** Renewals failed with transport errors more often in a row than `renewFailBudget` allows. */
  | 'unreachable';

/** The lock was lost: another owner may hold it now. Used as `handle.signal.reason`. */
export class LockLostError extends DLockError {
  readonly code = 'LOCK_LOST';
  constructor(
    readonly lockName: string,
    readonly fencingToken: bigint,
    readonly reason: LostReason,
    options?: { cause?: unknown },
  ) {
    super(`lock "${lockName}" (fencing token ${fencingToken}) was lost: ${reason}`, options);
  }
}

/** The handle was released by its owner. Used as `handle.signal.reason` after `release()`. */
export class LockReleasedError extends DLockError {
  readonly code = 'LOCK_RELEASED';
  constructor(
    readonly lockName: string,
    readonly fencingToken: bigint,
  ) {
    super(`lock "${lockName}" (fencing token ${fencingToken}) was released`);
  }
}

/** The service could not be reached, failed, or did not answer within `operationTimeoutMs`. */
export class TransportError extends DLockError {
  readonly code = 'TRANSPORT';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The client was closed; it accepts no further calls. */
export class ClientClosedError extends DLockError {
  readonly code = 'CLIENT_CLOSED';
  constructor() {
    super('the lock client is closed');
  }
}
