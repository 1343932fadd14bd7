/**
 * Semaphores on etcd (issue 15), run by `node src/run.mjs etcd:semaphores`: a raw recipe written on etcd3 (the
 * baseline, etcd-recipe.mjs) beside @dlock/etcd with its default lease per permit and in session mode, against one
 * etcd (DLOCK_BENCH_ETCD_ENDPOINT). Requests are the gRPC messages each worker's client sent. See suite.mjs.
 */

import { connectEtcd, ETCD_ENDPOINT, serverVersion } from '../etcd/client.mjs';
import { packageVersion } from '../lib/index.mjs';
import { dlockSemaphoreSubject } from './dlock.mjs';
import { etcdRecipeSubject } from './etcd-recipe.mjs';
import { runSemaphoreSuite } from './suite.mjs';

const dlock = (key, label, session) =>
  dlockSemaphoreSubject({
    key,
    name: `@dlock/etcd (${label})`,
    adapter: '@dlock/etcd',
    config: `etcd3 ${packageVersion('etcd3')}, a client per worker; EtcdLockService ${session ? 'session: true' : 'defaults (a lease per permit)'}`,
    async openService({ EtcdLockService }) {
      const { client, countRequests } = connectEtcd();
      const service = new EtcdLockService({
        client,
        keyPrefix: 'dlock-bench-sem/',
        ...(session ? { session: true } : {}),
      });
      return { service, close: async () => client.close(), requests: countRequests };
    },
  });

await runSemaphoreSuite({
  backend: 'etcd',
  title: 'etcd',
  server: { name: 'etcd', version: await serverVersion(), address: ETCD_ENDPOINT },
  subjects: [
    etcdRecipeSubject(),
    dlock('dlock-lease', 'lease per permit', false),
    dlock('dlock-session', 'session', true),
  ],
  notes: [
    '*requests*: gRPC messages the workers’ clients sent, counted by a client interceptor: each unary call and each ' +
      'message written on a stream (a keep-alive, a watch create or cancel) is one. *client CPU*: ' +
      '`process.cpuUsage()` of the bench process, where all 16 workers run.',
  ],
});
