import { encodeLockName } from '../keys.js';

/**
 * Its own default prefix: a Redlock node could be a Redis that a single-node `RedisLockService` also uses, and the
 * two store a lock differently (a string here, a hash there).
 */
export const DEFAULT_REDLOCK_PREFIX = 'dlock:redlock:';

/** The keys of one lock on every Redlock node. They share the hash tag `{<encoded name>}`. */
export interface RedlockKeys {
  /** String holding the grant's ownership token, with the lease as its TTL. */
  readonly lock: string;
  /** This node's fencing counter for the name (a decimal string), kept for the fence retention after each use. */
  readonly fence: string;
  /** Channel on which a release announces the fencing token it freed. */
  readonly released: string;
}

/** `prefix` must already be validated (no braces); the name is escaped so the hash tag cannot be cut short. */
export function redlockKeys(prefix: string, name: string): RedlockKeys {
  const base = `${prefix}{${encodeLockName(name)}}:`;
  return { lock: `${base}lock`, fence: `${base}fence`, released: `${base}released` };
}
