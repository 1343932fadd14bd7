/**
 * Semaphores on Redis (issue 15), run by `node src/run.mjs redis:semaphores`: redis-semaphore's Semaphore (the
 * reference row) beside @dlock/redis on node-redis and on ioredis, against one Redis (DLOCK_BENCH_REDIS_URL).
 * Requests are the commands this process wrote to Redis (../redis/request-counter.mjs); server commands are
 * `INFO commandstats` deltas, server-wide. See suite.mjs.
 */
import { fmt, packageVersion, sleep } from '../lib/index.mjs';
import { connectIoredis } from '../redis/ioredis.mjs';
import { connectNodeRedis, openServerProbe, REDIS_URL } from '../redis/server.mjs';
import { dlockSemaphoreSubject } from './dlock.mjs';
import { redisSemaphoreSubject } from './redis-semaphore.mjs';
import { runSemaphoreSuite } from './suite.mjs';

const KEY_PREFIX = 'dlock-bench-sem:';
const probe = await openServerProbe();

// `INFO commandstats` counts every client of the server: measure what the others send while the bench is idle.
const idleRate = async () => {
  const c0 = await probe.countCommands();
  await sleep(1000);
  const c1 = await probe.countCommands();
  return c1 >= c0 ? c1 - c0 : Number.NaN;
};
const before = await idleRate();
let after = Number.NaN;

const semaphorePeer = redisSemaphoreSubject({ countRequests: probe.countRequests, baseline: true });

await runSemaphoreSuite({
  backend: 'redis',
  title: 'Redis',
  server: { name: 'Redis', version: probe.version, address: REDIS_URL },
  counters: { commands: probe.countCommands },
  subjects: [
    semaphorePeer,
    dlockSemaphoreSubject({
      key: 'dlock-node-redis',
      name: '@dlock/redis on node-redis',
      adapter: '@dlock/redis',
      config: `redis ${packageVersion('redis')}, a client and a subscriber connection per worker`,
      countRequests: probe.countRequests,
      async openService({ RedisLockService }) {
        const opened = [];
        const close = async () => {
          for (const c of opened) await c.close().catch(() => {});
        };
        try {
          opened.push(await connectNodeRedis('@dlock/redis'));
          opened.push(await connectNodeRedis('@dlock/redis subscriber'));
        } catch (error) {
          await close();
          throw error;
        }
        const service = new RedisLockService({
          client: opened[0],
          subscriber: opened[1],
          keyPrefix: KEY_PREFIX,
        });
        return { service, close };
      },
    }),
    dlockSemaphoreSubject({
      key: 'dlock-ioredis',
      name: '@dlock/redis on ioredis',
      adapter: '@dlock/redis',
      config: `ioredis ${packageVersion('ioredis')}, a client per worker (the service duplicates it for pub/sub)`,
      countRequests: probe.countRequests,
      async openService({ RedisLockService }) {
        const client = await connectIoredis('@dlock/redis');
        const service = new RedisLockService({ client, keyPrefix: KEY_PREFIX });
        return { service, close: async () => client.disconnect() };
      },
    }),
  ],
  notes: [
    '*requests*: commands this process wrote to Redis, counted on its sockets (a script call is one). *server ' +
      'commands*: `INFO commandstats` deltas, which also count the commands scripts run inside Redis and every ' +
      "other client's. *client CPU*: `process.cpuUsage()` of the bench process, where all 16 workers run.",
    () =>
      `Other clients ran ${fmt(before)} commands/s on the server in a 1 s idle probe before the run and ` +
      `${fmt(after)} in one after it` +
      (before > 20 || after > 20 ? ': the *server commands* column includes theirs.' : '.'),
    () => {
      const lost = semaphorePeer.lost();
      return lost ? `redis-semaphore reported ${fmt(lost)} permits lost (onLockLost).` : '';
    },
  ],
  async onClose() {
    after = await idleRate();
    await probe.close();
  },
});
