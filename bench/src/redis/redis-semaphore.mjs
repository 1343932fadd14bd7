/**
 * redis-semaphore's Mutex on ioredis: one Mutex object per acquisition (that is how the library models a holder).
 * Waits use its own loop (`acquireTimeout` = the caller's wait, `retryInterval` between attempts); renewal is its
 * built-in refresh timer (every 0.8 × TTL by default).
 */
import { Mutex } from 'redis-semaphore';
import { packageVersion } from '../lib/index.mjs';
import { connectIoredis } from './ioredis.mjs';

export function redisSemaphoreSubject({ countRequests, countCommands, retryIntervalMs = 10 }) {
  let client;
  const lost = () => {};

  return {
    name: 'redis-semaphore Mutex',
    version: packageVersion('redis-semaphore'),
    config: `ioredis ${packageVersion('ioredis')}; retryInterval ${retryIntervalMs} ms, acquireTimeout = wait; refresh at 0.8 × TTL (default)`,
    countRequests,
    countCommands,
    async setup() {
      client = await connectIoredis('redis-semaphore');
    },
    async acquire(name, { ttlMs, waitMs, signal }) {
      const mutex = new Mutex(client, name, {
        lockTimeout: ttlMs,
        // acquireTimeout 0 would make no attempt at all: one attempt is expressed by the attempts limit.
        acquireTimeout: waitMs > 0 ? waitMs : 1000,
        acquireAttemptsLimit: waitMs > 0 ? Number.POSITIVE_INFINITY : 1,
        retryInterval: retryIntervalMs,
        onLockLost: lost,
      });
      try {
        if (!(await mutex.tryAcquire(signal))) return null;
      } catch (error) {
        if (signal?.aborted) return null;
        throw error;
      }
      return { release: () => mutex.release() };
    },
    async hold(name, { ttlMs, onLost }) {
      const mutex = new Mutex(client, name, {
        lockTimeout: ttlMs,
        acquireAttemptsLimit: 1,
        onLockLost: onLost,
      });
      if (!(await mutex.tryAcquire())) throw new Error(`redis-semaphore: ${name} is busy`);
      return { release: () => mutex.release() };
    },
    async close() {
      client?.disconnect();
    },
  };
}
