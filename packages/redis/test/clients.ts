import { Redis as IORedis, Cluster as IORedisCluster } from 'ioredis';
import { Redis as IORedis6, Cluster as IORedisCluster6 } from 'ioredis6';
import { createClient, createCluster } from 'redis';
import { createClient as createClient6, createCluster as createCluster6 } from 'redis6';

/**
 * Every client family × major × protocol the package supports, connected as an application would connect it, with
 * quick reconnects (tests restart servers) and error listeners (a dropped connection must not crash the run).
 * Suites loop over these so that each one runs against every supported client.
 */
export interface Connected {
  /** Passed to the services as `client` (or one of Redlock's `clients`). */
  readonly client: object;
  /** A raw command through this client, for assertions. */
  command(args: readonly string[]): Promise<unknown>;
  close(): Promise<void>;
}

export interface Family {
  readonly label: string;
  connect(url: string): Promise<Connected>;
}

const retry = (retries: number): number => Math.min(20 * 2 ** retries, 200);

function nodeRedis(label: string, make: typeof createClient | typeof createClient6, RESP?: 3): Family {
  return {
    label,
    async connect(url) {
      const client = (make as typeof createClient)({
        url,
        ...(RESP === undefined ? {} : { RESP }),
        socket: { reconnectStrategy: retry, connectTimeout: 2_000 },
      });
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: (args) => client.sendCommand([...args]),
        close: async () => {
          if (!client.isOpen) return;
          await Promise.race([client.close(), new Promise((r) => setTimeout(r, 1_000))]).catch(() => {});
          if (client.isOpen) client.destroy();
        },
      };
    },
  };
}

function ioredis(label: string, Make: typeof IORedis | typeof IORedis6): Family {
  return {
    label,
    async connect(url) {
      const client = new (Make as typeof IORedis)(url, {
        retryStrategy: retry,
        connectTimeout: 2_000,
        maxRetriesPerRequest: 1,
        lazyConnect: true,
      });
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: ([command, ...rest]) => client.call(command as string, ...rest),
        close: async () => {
          client.disconnect();
        },
      };
    },
  };
}

export const FAMILIES: readonly Family[] = [
  nodeRedis('node-redis 5', createClient),
  nodeRedis('node-redis 5 RESP3', createClient, 3),
  nodeRedis('node-redis 6 (RESP3)', createClient6),
  ioredis('ioredis 5', IORedis),
  ioredis('ioredis 6 (RESP3)', IORedis6),
];

/** One node-redis and one ioredis family, for suites too slow to run on every major. */
export const FAMILY_PAIR: readonly Family[] = [FAMILIES[0] as Family, FAMILIES[3] as Family];

export interface ClusterFamily {
  readonly label: string;
  connect(rootNodes: readonly { host: string; port: number; url: string }[]): Promise<Connected>;
}

function nodeRedisCluster(label: string, make: typeof createCluster | typeof createCluster6): ClusterFamily {
  return {
    label,
    async connect(rootNodes) {
      const client = (make as typeof createCluster)({ rootNodes: rootNodes.map(({ url }) => ({ url })) });
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: (args) => client.sendCommand(undefined, false, [...args]),
        close: async () => {
          await Promise.race([client.close(), new Promise((r) => setTimeout(r, 1_000))]).catch(() => {});
        },
      };
    },
  };
}

function ioredisCluster(label: string, Make: typeof IORedisCluster | typeof IORedisCluster6): ClusterFamily {
  return {
    label,
    async connect(rootNodes) {
      const client = new (Make as typeof IORedisCluster)(
        rootNodes.map(({ host, port }) => ({ host, port })),
        { lazyConnect: true },
      );
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: ([command, ...rest]) => client.call(command as string, ...rest),
        close: async () => {
          client.disconnect();
        },
      };
    },
  };
}

export const CLUSTER_FAMILIES: readonly ClusterFamily[] = [
  nodeRedisCluster('node-redis 5 createCluster', createCluster),
  nodeRedisCluster('node-redis 6 createCluster (RESP3)', createCluster6),
  ioredisCluster('ioredis 5 Cluster', IORedisCluster),
  ioredisCluster('ioredis 6 Cluster (RESP3)', IORedisCluster6),
];
