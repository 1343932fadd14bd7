/**
 * Deterministic tests for code that uses dlock: {@link FakeClock} (time that moves only when the test says so),
 * {@link FaultyLockService} (wraps a service to fail, hang or drop calls on demand) and {@link FencedStore} (a
 * resource that checks fencing tokens). The contract every backend must pass is in
 * {@link contract! | @dlock/testing/contract}.
 *
 * @module @dlock/testing
 */
export { FakeClock, type FakeClockOptions, FakeProcessClock } from './fake-clock.js';
export {
  type CallCounts,
  FaultyLockService,
  type PartitionMode,
  type ServiceMethod,
  type WatchFault,
} from './faulty-lock-service.js';
export { FencedStore, type FencedWrite, type FencedWriteResult } from './fenced-store.js';
