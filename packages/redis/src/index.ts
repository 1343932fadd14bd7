export type { MessageListener, RedisClientLike, RedisSubscriberLike } from './client-like.js';
export {
  DEFAULT_KEY_PREFIX,
  encodeLockName,
  hashTagOf,
  type LockKeys,
  lockKeys,
  validateKeyPrefix,
} from './keys.js';
export * from './redlock/index.js';
export { RedisLockService, type RedisLockServiceOptions } from './single/redis-lock-service.js';
export { newOwnershipToken, OWNERSHIP_TOKEN_BYTES } from './tokens.js';
