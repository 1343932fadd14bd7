/**
 * Scenario C' on a private 3-master Redis Cluster: 1,000 locks held by @dlock/redis with its own renewal, once on a
 * node-redis `createCluster` client and once on an ioredis `Cluster`, measured as renewal script calls per second
 * summed over the masters. Only (C) runs here: a cluster changes what a renewal costs, not one lock's round trip.
 */
import { fmt, packageVersion, runSuite } from '../../lib/index.mjs';
import { connectIoredisCluster, connectNodeRedisCluster, startCluster } from '../cluster.mjs';
import { dlockSubject } from '../dlock.mjs';
import { clusterTargets } from '../targets.mjs';

const MASTERS = 3;

let cluster;
let startError;
try {
  cluster = await startCluster({ masters: MASTERS });
} catch (error) {
  startError = error instanceof Error ? error.message : String(error);
  process.stderr.write(`[redis-cluster] the cluster could not be started: ${startError}\n`);
}

const clients = [
  {
    name: '@dlock/redis on node-redis createCluster',
    clientLabel: `a node-redis ${packageVersion('redis')} cluster client (createCluster)`,
    connect: (rootNodes, name) => connectNodeRedisCluster(rootNodes, name),
    close: (client) => client.close(),
  },
  {
    name: '@dlock/redis on ioredis Cluster',
    clientLabel: `an ioredis ${packageVersion('ioredis')} Cluster client`,
    connect: (rootNodes, name) => connectIoredisCluster(rootNodes, name),
    close: async (client) => client.disconnect(),
  },
];

const perMaster = new Map();
const subjects = clients.map(({ name, clientLabel, connect, close }) => {
  const counters = cluster?.counters();
  if (counters) perMaster.set(name, counters.perMaster);
  return dlockSubject({
    name,
    clientLabel,
    wiring: 'given only `client`',
    countRequests: counters?.countRequests,
    countCommands: counters?.countCommands,
    async connect() {
      if (!cluster) throw new Error(`the cluster could not be started: ${startError}`);
      const client = await connect(cluster.rootNodes, name);
      return { options: { client }, close: () => close(client) };
    },
  });
});

await runSuite({
  backend: 'redis-cluster',
  title: `Redis Cluster (${MASTERS} masters)`,
  server: {
    name: 'Redis Cluster',
    version: cluster?.version ?? 'not started',
    address: cluster ? cluster.masters.map((m) => `${m.host}:${m.port}`).join(', ') : 'none',
  },
  subjects,
  uncontended: false,
  contended: false,
  held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
  heldLabels: { scenario: "(C')", commands: `script calls/s (Σ ${MASTERS} masters)` },
  mayBeEmpty: true,
  targets: clusterTargets({
    masters: MASTERS,
    perMaster: (result) => {
      const split = perMaster.get(result.subject)?.();
      const seconds = result.durationMs / 1000;
      return split ? `per master ${split.map((n) => fmt(n / seconds, 1)).join(' / ')}` : undefined;
    },
  }),
  notes: [
    '*requests*: commands this process wrote to the masters’ ports (counted on its sockets, the counters’ own ' +
      '`INFO` excluded; slot-map refreshes count). *script calls*: `INFO commandstats` deltas of EVALSHA and EVAL ' +
      '(and their read-only forms) on each master, summed: one per renewal script a master ran. The cluster is ' +
      'private to this run, so no other client adds to them. *client CPU*: `process.cpuUsage()`.',
  ],
  onClose: async () => cluster?.stop(),
});
