/**
 * @dlock/redis through @dlock/core's LockClient, on node-redis: what an application would write. Waiting, renewal
 * and release are the library's own (no tuning): the client's renewal scheduler keeps scenario C's locks alive.
 */
import { lockClientSubject, packageVersion } from '../lib/index.mjs';
import { connectNodeRedis } from './server.mjs';

export function dlockSubject({ countRequests, countCommands }) {
  let client;
  let subscriber;

  return lockClientSubject({
    adapter: '@dlock/redis',
    name: '@dlock/redis',
    config: `redis ${packageVersion('redis')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults, RedisLockService with its own subscriber connection`,
    countRequests,
    countCommands,
    async connect({ RedisLockService }) {
      client = await connectNodeRedis('@dlock/redis');
      subscriber = await connectNodeRedis('@dlock/redis subscriber');
      return new RedisLockService({ client, subscriber, keyPrefix: 'dlock-bench:' });
    },
    async disconnect() {
      await subscriber?.close().catch(() => {});
      await client?.close().catch(() => {});
    },
  });
}
