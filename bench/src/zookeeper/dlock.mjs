/**
 * @dlock/zookeeper through @dlock/core's LockClient, as an application would write it, on a client the bench
 * passes in (so its requests and watch notifications can be counted). Library defaults otherwise: the grant's TTL
 * is the negotiated session timeout (10 s asked), renewals are one `multi` of checks per 100 locks.
 */
import { lockClientSubject, packageVersion } from '../lib/index.mjs';
import { connectZooKeeper, counted } from './client.mjs';

export function dlockSubject({ tally }) {
  let client;
  const subject = lockClientSubject({
    adapter: '@dlock/zookeeper',
    name: '@dlock/zookeeper',
    config: `node-zookeeper-client ${packageVersion('node-zookeeper-client')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults, session timeout 10 s`,
    countRequests: async () => client.stats.requests,
    notifications: () => client?.stats.notifications ?? new Map(),
    async connect({ ZooKeeperLockService }) {
      client = counted(await connectZooKeeper(10_000));
      return new ZooKeeperLockService({ client, root: '/dlock-bench/dlock' });
    },
    disconnect: () => client?.close(),
  });

  return {
    ...subject,
    /** The library's acquire, with each grant and release told to the tally (queue order and wake-ups). */
    async acquire(name, options) {
      tally.started(name);
      const handle = await subject.acquire(name, options);
      if (!handle) return null;
      tally.granted(name, handle.fencingToken);
      return {
        release: () => {
          tally.released(name);
          return handle.release();
        },
      };
    },
  };
}
