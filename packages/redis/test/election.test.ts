import { randomBytes } from 'node:crypto';
import { type Lease, LockClient, UnsupportedError } from '@dlock/core';
import { REDIS_URL, type RedisCluster, startRedisCluster } from '@dlock/test-utils';
import { type ContractSubject, electionContract } from '@dlock/testing/contract';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedisClientLike, RedisLockService, RedlockService } from '../src/index.js';
import { CLUSTER_FAMILIES, FAMILY_PAIR } from './clients.js';
import { commandCalls, connect, disconnect, eventually, type Redis, SideRedis, sleep } from './helpers.js';

// Elections on RedisLockService: core's election contract on the shared server (node-redis and ioredis) and on a real
// 3-master cluster (every cluster client family), then what the lock key stores for them on a private server.

for (const family of FAMILY_PAIR) {
  electionContract(
    `RedisLockService (${family.label})`,
    async (): Promise<ContractSubject> => {
      const connected = await family.connect(REDIS_URL);
      const service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-election:',
        fenceRetentionMs: 60_000,
      });
      return {
        service,
        close: async () => {
          await service.close();
          await connected.close();
        },
      };
    },
    { fifo: true },
  );
}

describe('on a 3-master cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  for (const family of CLUSTER_FAMILIES) {
    electionContract(
      `RedisLockService on a cluster (${family.label})`,
      async (): Promise<ContractSubject> => {
        const connected = await family.connect(cluster.rootNodes);
        const service = new RedisLockService({
          client: connected.client as RedisClientLike,
          keyPrefix: 'dlock-election:',
          fenceRetentionMs: 60_000,
        });
        return {
          service,
          close: async () => {
            await service.close();
            await connected.close();
          },
        };
      },
      { fifo: true },
    );
  }
});

it('RedlockService refuses elections: it has no inspect or updateMetadata', async () => {
  const client = await connect(REDIS_URL);
  const service = new RedlockService({ clients: [client] });
  const locks = new LockClient(service);
  try {
    expect(() => locks.election('e', { ttlMs: 1_000 })).toThrow(UnsupportedError);
    expect('inspect' in service).toBe(false);
    expect('updateMetadata' in service).toBe(false);
  } finally {
    await locks.close();
    await service.close();
    await disconnect(client);
  }
});
