/**
 * redis-semaphore's `Semaphore` on ioredis, with its default options: a sorted set of holders scored by the
 * client's clock, one Lua script per attempt, retried every 10 ms while full, refreshed every 0.8 × the 10 s lock
 * timeout. Only `acquireTimeout` is set, to the caller's wait (its default, 10 s, could end a wait inside the
 * window), and `onLockLost` counts instead of throwing from a timer. One Semaphore object per acquisition, as the
 * library models a holder.
 */
import { Semaphore } from 'redis-semaphore';
import { packageVersion } from '../lib/index.mjs';
import { connectIoredis } from '../redis/ioredis.mjs';

export function redisSemaphoreSubject({ countRequests, baseline = false }) {
  let lost = 0;
  return {
    key: 'redis-semaphore',
    name: 'redis-semaphore Semaphore',
    version: packageVersion('redis-semaphore'),
    baseline,
    config:
      `ioredis ${packageVersion('ioredis')}, one client per worker; default options (retryInterval 10 ms, ` +
      'lockTimeout 10 s, refresh at 0.8 × lockTimeout), acquireTimeout = the wait',
    countRequests,
    lost: () => lost,
    async open() {
      const client = await connectIoredis('redis-semaphore');
      return {
        async acquire(name, { permits, ttlMs, waitMs, signal }) {
          const semaphore = new Semaphore(client, name, permits, {
            lockTimeout: ttlMs,
            acquireTimeout: waitMs,
            onLockLost: () => {
              lost += 1;
            },
          });
          if (!(await semaphore.tryAcquire(signal))) return null;
          return { release: () => semaphore.release() };
        },
        async close() {
          client.disconnect();
        },
      };
    },
  };
}
