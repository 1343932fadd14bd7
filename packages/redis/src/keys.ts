import { InvalidArgumentError } from '@dlock/core';

/** Prefix of every key and channel the adapter uses unless `keyPrefix` says otherwise. */
export const DEFAULT_KEY_PREFIX = 'dlock:';

/** The Redis keys (and the release channel) of one lock. All share the hash tag `{<encoded name>}`. */
export interface LockKeys {
  /**
   * String: held `"<who> <fencing token> <expiry ms> <flags>"` (who = the holder's ownership token, expiring at the
   * stated expiry; renew and release compare `"<ownership token> <fencing token> "`), or a tombstone
   * `"~ <last token> <flags>"` that keeps the counter between grants. See `single/scripts.ts`.
   */
  readonly lock: string;
  /** The name's last fencing token (a decimal string), or a refused acquire's clock reading in µs above it. */
  readonly fence: string;
  /** List of waiting ownership tokens, oldest first. */
  readonly queue: string;
  /** Hash from a waiting ownership token to `"<deadline ms> <ttl ms> <notify channel>"`. */
  readonly waiters: string;
  /** Channel announcing that the lock became free with nobody queued (for `watch`). */
  readonly released: string;
}

const NEEDS_ESCAPE = /[%{}]/;
const ESCAPES: Readonly<Record<string, string>> = { '%': '%25', '{': '%7B', '}': '%7D' };

/**
 * Escapes `%`, `{` and `}` so that the name can sit inside a hash tag: Redis Cluster hashes the text between the
 * first `{` and the next `}`, so a `}` in the name would cut the tag short and scatter one lock's keys over slots.
 * Escaping `%` too keeps the mapping injective (`%7D` and `}` stay different). Everything else, unicode included,
 * is kept: Redis keys are binary-safe.
 */
export function encodeLockName(name: string): string {
  return NEEDS_ESCAPE.test(name) ? name.replace(/[%{}]/g, (c) => ESCAPES[c] as string) : name;
}

/** Rejects prefixes that would break the hash tag (a brace would start or end the tag inside the prefix). */
export function validateKeyPrefix(prefix: unknown, field = 'options.keyPrefix'): string {
  if (typeof prefix !== 'string')
    throw new InvalidArgumentError(field, `must be a string, got ${typeof prefix}`);
  if (/[{}]/.test(prefix)) {
    throw new InvalidArgumentError(field, 'must not contain "{" or "}" (the adapter owns the hash tag)');
  }
  if (Buffer.byteLength(prefix) > 256) throw new InvalidArgumentError(field, 'must be at most 256 bytes');
  return prefix;
}

/** The start of every key of lock `name`: the prefix, then the escaped name as the whole hash tag. */
function tagged(prefix: string, name: string): string {
  return `${prefix}{${encodeLockName(name)}}:`;
}

/** The keys of lock `name` under `prefix` (a validated prefix: no braces). */
export function lockKeys(prefix: string, name: string): LockKeys {
  const base = tagged(prefix, name);
  return {
    lock: `${base}lock`,
    fence: `${base}fence`,
    queue: `${base}queue`,
    waiters: `${base}waiters`,
    released: `${base}released`,
  };
}

/**
 * On a Redis Cluster, the channel on which lock `name`'s hand-offs reach the service `serviceId`: in the lock's hash
 * slot, because a script can only publish (SPUBLISH) to the shard that runs it.
 */
export function wakeChannel(prefix: string, name: string, serviceId: string): string {
  return `${tagged(prefix, name)}wake:${serviceId}`;
}

/**
 * The channel on which grants, releases and metadata updates of lock `name` are announced while the name is observed
 * (elections). In the lock's hash slot, like every channel a script publishes on.
 */
export function changeChannel(prefix: string, name: string): string {
  return `${tagged(prefix, name)}changed`;
}

/**
 * The keys of semaphore `name`: under `<prefix>{<encoded name>}:sem:`, so all in one hash slot, and never one of the
 * lock keys of the same name (those end in `:lock`, `:fence`, … right after the tag). See `single/semaphore-scripts.ts`.
 */
export interface SemaphoreKeys {
  /**
   * Sorted set: member `n` scored `-permits` (the limit, read and checked while the semaphore is in use), and one
   * member per slot ever used since the semaphore was last idle, `0 … hw − 1`, scored with the end of its lease as
   * last known (server ms; 0: free).
   */
  readonly slots: string;
  /** The last fencing token handed out on any slot (the lock scripts' fence key, minted the same way). */
  readonly fence: string;
  /** List of waiting ownership tokens, oldest first. */
  readonly queue: string;
  /**
   * Hash from a waiting ownership token to `"<deadline ms> <ttl ms> <notify channel>"`, or `"=<slot>"` once handed
   * one; and from `"=<slot>"` to the ownership token of that slot's last hand-on (so the next hand-on can drop a mark
   * its holder never cleared).
   */
  readonly waiters: string;
}

/** The keys of semaphore `name` under `prefix` (a validated prefix: no braces). */
export function semaphoreKeys(prefix: string, name: string): SemaphoreKeys {
  const base = `${tagged(prefix, name)}sem:`;
  return { slots: `${base}slots`, fence: `${base}fence`, queue: `${base}queue`, waiters: `${base}waiters` };
}

/**
 * Slot `slot` of semaphore `name`: a string valued like a held lock key, `"<who> <fencing token> <expiry ms> <flags>"`,
 * expiring with the lease, so that renewals are the lock's own (see `renew-batches.ts`).
 */
export function semaphoreSlotKey(prefix: string, name: string, slot: number): string {
  return `${tagged(prefix, name)}sem:slot:${slot}`;
}

/** On a Redis Cluster, where hand-offs of semaphore `name`'s slots reach the service `serviceId` (in its hash slot). */
export function semaphoreWakeChannel(prefix: string, name: string, serviceId: string): string {
  return `${tagged(prefix, name)}sem:wake:${serviceId}`;
}

/** The key a lease's renewal rewrites: the lock key, or for a permit (`slot` set) its slot key. */
export function leaseKey(prefix: string, lease: { readonly name: string; readonly slot?: number }): string {
  return lease.slot === undefined
    ? lockKeys(prefix, lease.name).lock
    : semaphoreSlotKey(prefix, lease.name, lease.slot);
}

/**
 * Redlock's own default prefix: a Redlock node could be a Redis that a single-node `RedisLockService` also uses,
 * and the two store a lock differently.
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
  const base = tagged(prefix, name);
  return { lock: `${base}lock`, fence: `${base}fence`, released: `${base}released` };
}

/** The part of a key Redis Cluster hashes: the first `{…}` with something inside, else the whole key. */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open === -1) return key;
  const close = key.indexOf('}', open + 1);
  if (close === -1 || close === open + 1) return key;
  return key.slice(open + 1, close);
}
