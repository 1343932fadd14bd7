/** @deprecated A Redlock node's subscriber is always derived from its client; the type is kept until 1.0. */
export type { RedisSubscriberLike as RedlockSubscriberLike, RedlockClientLike } from '../client-like.js';
export { DEFAULT_REDLOCK_PREFIX } from '../keys.js';
export { RedlockService, type RedlockServiceOptions } from './redlock-service.js';
