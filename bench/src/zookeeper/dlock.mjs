/**
 * @dlock/zookeeper through @dlock/core's LockClient, as an application would write it, on a client the bench
 * passes in (so its requests and watch notifications can be counted). Library defaults otherwise: the grant's TTL
 * is the negotiated session timeout (10 s asked), renewals are one `multi` of checks per 100 locks.
 */
import { packageVersion } from '../lib/index.mjs';
import { connectZooKeeper, counted } from './client.mjs';

export function dlockSubject({ tally }) {
  let client;
  let service;
  let lockClient;

  return {
    name: '@dlock/zookeeper',
    version: packageVersion('@dlock/zookeeper'),
    config: `node-zookeeper-client ${packageVersion('node-zookeeper-client')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults, session timeout 10 s`,
    countRequests: async () => client.stats.requests,
    notifications: () => client?.stats.notifications ?? new Map(),
    async setup() {
      // Imported here so that the raw recipe still runs while the adapter is not built.
      const [{ LockClient }, { ZooKeeperLockService }] = await Promise.all([
        import('@dlock/core'),
        import('@dlock/zookeeper'),
      ]);
      client = counted(await connectZooKeeper(10_000));
      service = new ZooKeeperLockService({ client, root: '/dlock-bench/dlock' });
      lockClient = new LockClient(service);
    },
    async acquire(name, { ttlMs, waitMs, signal }) {
      tally.started(name);
      let handle;
      try {
        handle = await lockClient.tryAcquire(name, signal ? { ttlMs, waitMs, signal } : { ttlMs, waitMs });
      } catch (error) {
        if (signal?.aborted) return null;
        throw error;
      }
      if (!handle) return null;
      tally.granted(name, handle.fencingToken);
      return {
        release: () => {
          tally.released(name);
          return handle.release();
        },
      };
    },
    hold(name, { ttlMs, onLost }) {
      return lockClient.acquire(name, { ttlMs, onLost: () => onLost() });
    },
    async close() {
      await lockClient?.close();
      await service?.close();
      client?.close();
    },
  };
}
