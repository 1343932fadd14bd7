/**
 * Semaphores on ZooKeeper (issue 15), run by `node src/run.mjs zookeeper:semaphores`: a Curator-style recipe
 * written on node-zookeeper-client (the baseline, zookeeper-recipe.mjs) beside @dlock/zookeeper, against one
 * ZooKeeper (DLOCK_BENCH_ZK_CONNECT). Requests are the requests each worker's client sent (pings excluded). See
 * suite.mjs.
 */
import { packageVersion } from '../lib/index.mjs';
import { connectZooKeeper, counted, serverVersion, ZK_CONNECT } from '../zookeeper/client.mjs';
import { dlockSemaphoreSubject } from './dlock.mjs';
import { runSemaphoreSuite } from './suite.mjs';
import { zooKeeperRecipeSubject } from './zookeeper-recipe.mjs';

await runSemaphoreSuite({
  backend: 'zookeeper',
  title: 'ZooKeeper',
  server: { name: 'ZooKeeper', version: await serverVersion(), address: ZK_CONNECT },
  subjects: [
    zooKeeperRecipeSubject(),
    dlockSemaphoreSubject({
      key: 'dlock',
      name: '@dlock/zookeeper',
      adapter: '@dlock/zookeeper',
      config: `node-zookeeper-client ${packageVersion('node-zookeeper-client')}, a session (10 s) per worker`,
      async openService({ ZooKeeperLockService }) {
        const client = counted(await connectZooKeeper(10_000));
        const service = new ZooKeeperLockService({ client, keyPrefix: '/dlock-bench/semaphores' });
        return { service, close: async () => client.close(), requests: async () => client.stats.requests };
      },
    }),
  ],
  notes: [
    '*requests*: ZooKeeper requests the workers’ clients sent (a `multi` is one; pings excluded). *client CPU*: ' +
      '`process.cpuUsage()` of the bench process, where all 16 workers run.',
  ],
});
