export type { RedlockClientLike, RedlockSubscriberLike } from '../client-like.js';
export { DEFAULT_REDLOCK_PREFIX } from '../keys.js';
export { RedlockService, type RedlockServiceOptions } from './redlock-service.js';
