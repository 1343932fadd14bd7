/**
 * One small error hierarchy. Every error carries a stable `code`; match on it, never on messages.
 * The `Symbol.for('dlock.error')` brand lets {@link isDLockError} recognise errors from another copy of this package
 * (duplicated installs) and from the fencing packages, which do not depend on core.
 */
const BRAND = Symbol.for('dlock.error');

/** The `code` of each dlock error class: stable across versions, unlike messages. */
export type DLockErrorCode =
  | 'INVALID_ARGUMENT'
  | 'ACQUIRE_TIMEOUT'
  | 'LOCK_LOST'
  | 'LOCK_RELEASED'
  | 'TRANSPORT'
  | 'CLIENT_CLOSED'
  | 'UNSUPPORTED'
  | 'PERMITS_MISMATCH';

/**
 * The base of every error core throws; `name` is the subclass's name. Test with `instanceof` for this copy of the
 * package, or with {@link isDLockError} for any copy.
 */
export abstract class DLockError extends Error {
  /** What went wrong, fixed per subclass. */
  abstract readonly code: DLockErrorCode;
  /** The brand {@link isDLockError} looks for (`Symbol.for('dlock.error')`, shared by every copy of the package). */
  readonly [BRAND] = true;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** True for any dlock error, including those thrown by another installed copy of a dlock package. */
export function isDLockError(value: unknown): value is Error & {
  /** The error's code: a {@link DLockErrorCode}, or an adapter's or fencing package's own. */
  readonly code: string;
} {
  if (typeof value !== 'object' || value === null) return false;
  try {
    return (value as { [BRAND]?: unknown })[BRAND] === true;
  } catch {
    // A revoked Proxy, or one whose get trap throws: this runs where a service's failure is mapped, and a throw
    // here would leave the call it failed unsettled.
    return false;
  }
}

/**
 * `String(value)` for a message, or a fixed text for a value that has none: `String()` throws on a null-prototype
 * object or an error whose `toString` throws, and a message is often built where a throw would leave a call
 * unsettled (a promise reaction) or escape into the code that emitted an event.
 */
export function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    return `a value String() cannot convert (${typeof value})`;
  }
}

/** A public call received a value of the wrong type or range. Thrown before any network call. */
export class InvalidArgumentError extends DLockError {
  /** Always `INVALID_ARGUMENT`. */
  readonly code = 'INVALID_ARGUMENT';
  constructor(
    /** Dotted path of the offending field, e.g. `options.ttlMs`. */
    readonly field: string,
    problem: string,
  ) {
    super(`${field} ${problem}`);
  }
}

/** Why an acquire ran out of budget without a lock. */
export type AcquireTimeoutReason =
  /** The service kept refusing: another owner held the lock (or, on Redlock, contended for it). */
  | 'held-by-another-owner'
  /** This same client holds the lock through another handle; `reentrant: true` would have shared it. */
  | 'held-by-this-client'
  /**
   * The service granted the lock, but the grant arrived with too little of its validity window left for one
   * renewal round trip, so it was given back: the budget went to transit, not to a holder.
   */
  | 'spent-in-transit'
  /** A semaphore: every permit stayed held (or queued waiters were ahead) for the whole budget. */
  | 'no-free-permit';

const TIMEOUT_EXPLANATIONS: Record<AcquireTimeoutReason, string> = {
  'held-by-another-owner': 'is held by another owner',
  'held-by-this-client':
    'is held by this same client through another handle (acquire both with reentrant: true to share it)',
  'spent-in-transit':
    'was granted, but each grant arrived with less validity left than one round trip and was given back (raise ttlMs or waitMs)',
  'no-free-permit': 'had no free permit',
};

/** The wait budget ran out without a lock; `reason` says why. */
export class AcquireTimeoutError extends DLockError {
  /** Always `ACQUIRE_TIMEOUT`. */
  readonly code = 'ACQUIRE_TIMEOUT';
  constructor(
    /** The lock's name, or the semaphore's. */
    readonly lockName: string,
    /** How long the call waited before giving up, in ms. */
    readonly waitedMs: number,
    /** How many acquire requests went to the service (a backend that queues usually needs one). */
    readonly attempts: number,
    /** Why the budget ran out without a lock. */
    readonly reason: AcquireTimeoutReason = 'held-by-another-owner',
  ) {
    super(
      `${reason === 'no-free-permit' ? 'semaphore' : 'lock'} "${lockName}" ${TIMEOUT_EXPLANATIONS[reason]}; gave up after ${Math.round(waitedMs)} ms and ${attempts} attempt(s)`,
    );
  }
}

/** Why a handle left the held state without being released. */
export type LostReason =
  /** The local validity deadline passed before a renewal could extend it (a pause, or renewals too slow). */
  | 'expired'
  /** The service answered that this grant no longer owns the lock. */
  | 'rejected'
  /**
   * Renewals kept failing with transport errors until the validity window closed (or, when `renewFailBudget` is
   * set, that many times in a row).
   */
  | 'unreachable';

/**
 * The lock was lost: another owner may hold it now. Used as `handle.signal.reason`, and the rejection of
 * `release()` and `withLock` when the lock did not last until the end of the work.
 */
export class LockLostError extends DLockError {
  /** Always `LOCK_LOST`. */
  readonly code = 'LOCK_LOST';
  constructor(
    /**
     * The lock's name. For a permit, its resource (`<semaphore>#<slot>`), or the semaphore's name when `release()`
     * found the permit already gone.
     */
    readonly lockName: string,
    /** The lost grant's fencing token: a resource that has seen a higher one refuses writes carrying it. */
    readonly fencingToken: bigint,
    /** How the loss was noticed. */
    readonly reason: LostReason,
    options?: { cause?: unknown },
  ) {
    super(`lock "${lockName}" (fencing token ${fencingToken}) was lost: ${reason}`, options);
  }
}

/** The handle was released by its owner. Used as `handle.signal.reason` after `release()`. */
export class LockReleasedError extends DLockError {
  /** Always `LOCK_RELEASED`. */
  readonly code = 'LOCK_RELEASED';
  constructor(
    /** The lock's name; for a permit, its resource (`<semaphore>#<slot>`). */
    readonly lockName: string,
    /** The released grant's fencing token. */
    readonly fencingToken: bigint,
  ) {
    super(`lock "${lockName}" (fencing token ${fencingToken}) was released`);
  }
}

/** The service could not be reached, failed, or did not answer within `operationTimeoutMs`. */
export class TransportError extends DLockError {
  /** Always `TRANSPORT`. */
  readonly code = 'TRANSPORT';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The client was closed; it accepts no further calls. */
export class ClientClosedError extends DLockError {
  /** Always `CLIENT_CLOSED`. */
  readonly code = 'CLIENT_CLOSED';
  constructor(options?: { cause?: unknown }) {
    super('the lock client is closed', options);
  }
}

/** The service behind the client cannot do what was asked (an election on a service without `inspect`). */
export class UnsupportedError extends DLockError {
  /** Always `UNSUPPORTED`. */
  readonly code = 'UNSUPPORTED';
}

/**
 * A semaphore was asked for with a `permits` limit other than the one its current holders and waiters were admitted
 * with: the service refuses rather than run a silently larger (or smaller) pool. Change a semaphore's limit only
 * while it is idle, or use a new name.
 */
export class PermitsMismatchError extends DLockError {
  /** Always `PERMITS_MISMATCH`. */
  readonly code = 'PERMITS_MISMATCH';
  constructor(
    /** The semaphore's name. */
    readonly semaphoreName: string,
    /** The limit this call asked for. */
    readonly requested: number,
    /** The limit the service holds for the semaphore's current holders and waiters. */
    readonly stored: number,
  ) {
    super(
      `semaphore "${semaphoreName}" is in use with permits: ${stored}; this call asked for permits: ${requested} (change the limit only while it is idle, or use another name)`,
    );
  }
}
