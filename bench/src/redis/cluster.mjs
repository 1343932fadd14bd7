/**
 * A private 3-master Redis Cluster for scenario C' (startRedisCluster from @dlock/test-utils: loopback ports, no
 * disk, killed when this process exits), the two cluster clients @dlock/redis may be handed, and the counters:
 *   countRequests  commands this process wrote to the masters' ports (request-counter.mjs), less the probes' own
 *   countCommands  script calls (EVALSHA, EVAL and their _ro forms) from `INFO commandstats`, summed over the
 *                  masters: a renewal is one script call on the master owning the keys it renews
 * Each subject gets its own counters; `perMaster()` gives the split of the last measured window.
 */

import { Cluster } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { countOutgoingRequests } from './request-counter.mjs';

const SCRIPT_CALLS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro']);

function scriptCalls(info) {
  let total = 0;
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m && SCRIPT_CALLS.has(m[1])) total += Number(m[2]);
  }
  return total;
}

/** Starts the cluster; throws a plain-worded error when @dlock/test-utils has no cluster starter (not built yet). */
export async function startCluster({ masters = 3 } = {}) {
  const testUtils = await import('@dlock/test-utils');
  if (typeof testUtils.startRedisCluster !== 'function') {
    throw new Error(
      '@dlock/test-utils exports no startRedisCluster (build it: pnpm --filter @dlock/test-utils build)',
    );
  }
  const cluster = await testUtils.startRedisCluster({ masters });
  const masterNodes = cluster.nodes.filter((n) => n.createdAs === 'master');
  const sent = countOutgoingRequests(masterNodes.map((n) => n.port));
  let probeRequests = 0;

  const probes = [];
  try {
    for (const node of masterNodes) {
      const before = sent();
      const probe = createClient({
        url: node.url,
        socket: { connectTimeout: 5000, reconnectStrategy: false },
      });
      probe.on('error', () => {});
      await probe.connect();
      probes.push(probe);
      probeRequests += sent() - before;
    }
  } catch (error) {
    await Promise.all(probes.map((p) => p.close().catch(() => {})));
    await cluster.stop();
    throw error;
  }
  const version = /redis_version:(\S+)/.exec(await probes[0].info('server'))?.[1] ?? 'unknown';

  /** Script calls on each master, in the order of `masterNodes`. */
  const readMasters = async () => {
    const before = sent();
    const values = await Promise.all(probes.map(async (p) => scriptCalls(await p.info('commandstats'))));
    probeRequests += sent() - before;
    return values;
  };

  return {
    version,
    masters: masterNodes.map(({ host, port, url }) => ({ host, port, url })),
    rootNodes: cluster.rootNodes,
    /** A fresh pair of counters for one subject. */
    counters() {
      const snapshots = [];
      return {
        countRequests: async () => sent() - probeRequests,
        countCommands: async () => {
          const values = await readMasters();
          snapshots.push(values);
          return values.reduce((a, b) => a + b, 0);
        },
        /** Script calls per master between the last two readings (one measured window of runHeld). */
        perMaster: () => {
          if (snapshots.length < 2) return undefined;
          const [a, b] = snapshots.slice(-2);
          return b.map((v, i) => v - a[i]);
        },
      };
    },
    async stop() {
      await Promise.all(probes.map((p) => p.close().catch(() => {})));
      await cluster.stop();
    },
  };
}

/** node-redis `createCluster` on the cluster's nodes, connected, with a bounded connect and no reconnects. */
export async function connectNodeRedisCluster(rootNodes, name) {
  const client = createCluster({
    rootNodes: rootNodes.map(({ url }) => ({ url })),
    defaults: { socket: { connectTimeout: 5000, reconnectStrategy: false } },
  });
  let reported = false;
  client.on('error', (error) => {
    if (!reported) process.stderr.write(`[redis-cluster] ${name}: ${error.message}\n`);
    reported = true;
  });
  await client.connect();
  return client;
}

/** ioredis `Cluster` on the cluster's nodes, connected, with a bounded connect and no endless reconnects. */
export async function connectIoredisCluster(rootNodes, name) {
  const client = new Cluster(
    rootNodes.map(({ host, port }) => ({ host, port })),
    {
      lazyConnect: true,
      clusterRetryStrategy: () => null,
      redisOptions: { connectTimeout: 5000, maxRetriesPerRequest: 1 },
    },
  );
  let reported = false;
  client.on('error', (error) => {
    if (!reported) process.stderr.write(`[redis-cluster] ${name}: ${error.message}\n`);
    reported = true;
  });
  await client.connect();
  return client;
}
