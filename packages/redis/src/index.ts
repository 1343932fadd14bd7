export type { RedisClientLike, RedisSubscriberLike } from './client-like.js';
/** The listener type of a pub/sub message (kept for 0.1 users; the services no longer take listeners). */
export type { MessageListener } from './clients/connection.js';
export {
  DEFAULT_KEY_PREFIX,
  encodeLockName,
  type LockKeys,
  lockKeys,
  type SemaphoreKeys,
  semaphoreKeys,
  semaphoreSlotKey,
} from './keys.js';
export * from './redlock/index.js';
export { RedisLockService, type RedisLockServiceOptions } from './single/redis-lock-service.js';
export { newOwnershipToken } from './tokens.js';
