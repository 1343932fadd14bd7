/**
 * The lock client for applications: {@link LockClient} with its handles, elections and semaphores, the errors it
 * throws, the events it emits, and the {@link LockService} interface a backend implements. Tools for writing a
 * backend are in {@link adapter! | @dlock/core/adapter}.
 *
 * @module @dlock/core
 */

/** @deprecated Import `CallDeadlines` from `@dlock/core/adapter`, with the other tools for backends; this root export goes in 1.0. */
export { CallDeadlines } from './bounded-call.js';
export { LockClient } from './client.js';
export { type Clock, type SleepOptions, systemClock } from './clock.js';
export {
  type CampaignOptions,
  Election,
  type ElectionOptions,
  type ObserveOptions,
  type RunWhileLeaderOptions,
} from './election/election.js';
export type { Leader } from './election/leader-feed.js';
export { Leadership, type LeadershipState } from './election/leadership.js';
export {
  AcquireTimeoutError,
  type AcquireTimeoutReason,
  ClientClosedError,
  DLockError,
  type DLockErrorCode,
  InvalidArgumentError,
  isDLockError,
  LockLostError,
  LockReleasedError,
  type LostReason,
  PermitsMismatchError,
  TransportError,
  UnsupportedError,
} from './errors.js';
export type {
  AcquireFailure,
  LockEventBase,
  LockEventListener,
  LockEventMap,
  LockEvents,
  LockEventType,
  LockKind,
} from './events.js';
export type { HandleState, LockHandle } from './handle.js';
export { MemoryLockService, type MemoryLockServiceOptions } from './memory/memory-lock-service.js';
export {
  type AcquireOptions,
  type LockClientOptions,
  MAX_NAME_BYTES,
  MAX_TIMER_MS,
  MIN_TTL_MS,
  type RetryOptions,
  validateName,
} from './options.js';
export { type Permit, type PermitOptions, Semaphore, type SemaphoreOptions } from './semaphore/semaphore.js';
export {
  type AcquireRequest,
  type AcquireResult,
  type Grant,
  type Lease,
  type LockInfo,
  type LockService,
  MAX_METADATA_BYTES,
  MAX_PERMITS,
  type PermitHolder,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
} from './service.js';
/** @internal The renewal cadence; kept here because `@dlock/etcd`'s tests import it from the root. */
export { renewIntervalMs } from './timing.js';
