/**
 * @dlock/redis through @dlock/core's LockClient, on node-redis: what an application would write. Waiting, renewal
 * and release are the library's own (no tuning): the client's renewal scheduler keeps scenario C's locks alive.
 */
import { packageVersion } from '../lib/index.mjs';
import { connectNodeRedis } from './server.mjs';

export function dlockSubject({ countRequests, countCommands }) {
  let client;
  let subscriber;
  let service;
  let lockClient;

  return {
    name: '@dlock/redis',
    version: packageVersion('@dlock/redis'),
    config: `redis ${packageVersion('redis')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults, RedisLockService with its own subscriber connection`,
    countRequests,
    countCommands,
    async setup() {
      // Imported here so that the other subjects still run while the adapter is not built.
      const [{ LockClient }, { RedisLockService }] = await Promise.all([
        import('@dlock/core'),
        import('@dlock/redis'),
      ]);
      client = await connectNodeRedis('@dlock/redis');
      subscriber = await connectNodeRedis('@dlock/redis subscriber');
      service = new RedisLockService({ client, subscriber, keyPrefix: 'dlock-bench:' });
      lockClient = new LockClient(service);
    },
    async acquire(name, { ttlMs, waitMs, signal }) {
      try {
        return await lockClient.tryAcquire(name, signal ? { ttlMs, waitMs, signal } : { ttlMs, waitMs });
      } catch (error) {
        if (signal?.aborted) return null;
        throw error;
      }
    },
    hold(name, { ttlMs, onLost }) {
      return lockClient.acquire(name, { ttlMs, onLost: () => onLost() });
    },
    async close() {
      await lockClient?.close();
      await service?.close?.();
      await subscriber?.close().catch(() => {});
      await client?.close().catch(() => {});
    },
  };
}
