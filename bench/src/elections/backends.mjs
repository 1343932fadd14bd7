/**
 * How the elections suite reaches each backend: the same servers (and address settings) as the lock suites.
 *
 *   BACKENDS[backend].server()        { name, version, address } for the report
 *   BACKENDS[backend].subjects(ttlMs) the rows of that backend, baseline first (subjects.mjs), the @dlock ones
 *                                     each opening a new LockService on connections of its own per instance
 *   BACKENDS[backend].wiring()        one line on how those services are configured
 *
 * Every instance of an application (a leader, a standby, an observer) opens its own service, so no two of them
 * share a connection, a session or a lease, as two processes would not.
 */
import { ENDPOINTS, packageVersion } from '../lib/index.mjs';
import { coreElectionSubject, etcd3ElectionSubject, handRolledSubject } from './subjects.mjs';

/** What a ZooKeeper session asks for: as short as the TTL every subject uses; the server may raise it. */
export const ZK_SESSION_TIMEOUT_MS = 2000;

async function openRedis() {
  const [{ createClient }, { RedisLockService }] = await Promise.all([
    import('redis'),
    import('@dlock/redis'),
  ]);
  const opened = [];
  const close = async () => {
    for (const c of opened) await c.close().catch(() => {});
  };
  try {
    for (let i = 0; i < 2; i++) {
      const client = createClient({
        url: ENDPOINTS.redis,
        socket: { connectTimeout: 5000, reconnectStrategy: false },
      });
      // A dead connection is reported by the calls made on it; the event only needs a listener.
      client.on('error', () => {});
      opened.push(client);
      await client.connect();
    }
    const service = new RedisLockService({
      client: opened[0],
      subscriber: opened[1],
      keyPrefix: 'dlock-bench-elections:',
    });
    return { service, close };
  } catch (error) {
    await close();
    throw error;
  }
}

async function openEtcd() {
  const [{ Etcd3 }, { EtcdLockService }] = await Promise.all([import('etcd3'), import('@dlock/etcd')]);
  const client = new Etcd3({ hosts: ENDPOINTS.etcd });
  const service = new EtcdLockService({ client, keyPrefix: 'dlock-bench-elections/' });
  return { service, close: async () => client.close() };
}

async function openZooKeeper() {
  const { ZooKeeperLockService } = await import('@dlock/zookeeper');
  const service = new ZooKeeperLockService({
    connectionString: ENDPOINTS.zookeeper,
    sessionTimeoutMs: ZK_SESSION_TIMEOUT_MS,
    keyPrefix: '/dlock-bench/elections',
  });
  return { service, close: async () => {} };
}

async function redisServer() {
  const { createClient } = await import('redis');
  const client = createClient({
    url: ENDPOINTS.redis,
    socket: { connectTimeout: 5000, reconnectStrategy: false },
  });
  client.on('error', () => {});
  await client.connect();
  try {
    const info = await client.info('server');
    return {
      name: 'Redis',
      version: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown',
      address: ENDPOINTS.redis,
    };
  } finally {
    await client.close();
  }
}

async function etcdServer() {
  const { serverVersion } = await import('../etcd/client.mjs');
  return { name: 'etcd', version: await serverVersion(), address: ENDPOINTS.etcd };
}

async function zooKeeperServer() {
  const { serverVersion } = await import('../zookeeper/client.mjs');
  return { name: 'ZooKeeper', version: await serverVersion(), address: ENDPOINTS.zookeeper };
}

const core = () => packageVersion('@dlock/core');

export const BACKENDS = {
  redis: {
    title: 'Redis',
    server: redisServer,
    wiring: () =>
      `@dlock/redis ${packageVersion('@dlock/redis')} on redis ${packageVersion('redis')} (a client and a ` +
      `subscriber connection), @dlock/core ${core()}`,
    subjects: (ttlMs) => [
      handRolledSubject({ openService: openRedis, ttlMs }),
      coreElectionSubject({ openService: openRedis, ttlMs }),
    ],
  },
  etcd: {
    title: 'etcd',
    server: etcdServer,
    wiring: () =>
      `@dlock/etcd ${packageVersion('@dlock/etcd')} on etcd3 ${packageVersion('etcd3')} (default options: a ` +
      `lease per lock), @dlock/core ${core()}`,
    subjects: (ttlMs) => [
      handRolledSubject({ openService: openEtcd, ttlMs }),
      coreElectionSubject({ openService: openEtcd, ttlMs }),
      etcd3ElectionSubject({ ttlMs }),
    ],
  },
  zookeeper: {
    title: 'ZooKeeper',
    server: zooKeeperServer,
    wiring: () =>
      `@dlock/zookeeper ${packageVersion('@dlock/zookeeper')} on node-zookeeper-client ` +
      `${packageVersion('node-zookeeper-client')} (session timeout ${ZK_SESSION_TIMEOUT_MS} ms asked), ` +
      `@dlock/core ${core()}`,
    subjects: (ttlMs) => [
      handRolledSubject({ openService: openZooKeeper, ttlMs }),
      coreElectionSubject({ openService: openZooKeeper, ttlMs }),
    ],
  },
};
