/**
 * Tools for writing a backend (`@dlock/core/adapter`), kept out of the root entry point that applications import:
 * the queue algorithm and its driver interface, call bounds, wake-ups, background clean-ups, option-key checks, the
 * allocation-free linked set, the guarded call of a watch's subscriber and the lease arithmetic core uses.
 *
 * @module adapter
 */
export {
  type BoundedCallOptions,
  boundedCall,
  CallDeadlines,
  type Deadline,
} from '../bounded-call.js';
export { textOf } from '../errors.js';
export { callSubscriber } from '../events.js';
export { Link, LinkedSet } from '../linked-set.js';
export { closestKey, rejectUnknownKeys } from '../option-keys.js';
export { validateMetadata, validateOwnerId } from '../options.js';
export {
  acquireInQueue,
  BackgroundRetries,
  type QueueDriver,
  type QueueTools,
  type Standing,
} from '../queue/index.js';
export { validatePermits } from '../semaphore/options.js';
export { driftMs, fullJitterBackoff, renewIntervalMs, validUntil } from '../timing.js';
export { linkSignals, unlessAborted, WakeSignal } from '../wake-signal.js';
