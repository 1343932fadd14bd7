/**
 * Tools for writing a backend (`@dlock/core/adapter`), kept out of the root entry point that applications import.
 */
export { boundedCall, CallDeadlines } from '../bounded-call.js';
export { closestKey, rejectUnknownKeys } from '../option-keys.js';
export {
  acquireInQueue,
  BackgroundRetries,
  type QueueDriver,
  type QueueTools,
  type Standing,
} from '../queue/index.js';
export { linkSignals, unlessAborted, WakeSignal } from '../wake-signal.js';
