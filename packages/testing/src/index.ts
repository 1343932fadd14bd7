export { FakeClock, type FakeClockOptions, FakeProcessClock } from './fake-clock.js';
export {
  type CallCounts,
  FaultyLockService,
  type PartitionMode,
  type ServiceMethod,
  type WatchFault,
} from './faulty-lock-service.js';
export { FencedStore, type FencedWrite, type FencedWriteResult } from './fenced-store.js';
