import { LockClient, UnsupportedError } from '@dlock/core';
import { REDIS_URL, type RedisCluster, startRedisCluster } from '@dlock/test-utils';
import { inspectContract } from '@dlock/testing/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedlockClientLike } from '../src/index.js';
import { RedlockService } from '../src/redlock/index.js';
import { CLUSTER_FAMILIES, FAMILY_PAIR } from './clients.js';
import { subjectOn } from './semaphore-cases.js';

// What inspect reports on one server (a node-redis and an ioredis family) and on a 3-master cluster: the holder's
// owner id, token, PTTL and metadata from the lock key, and the queue's length as waiters.
for (const family of FAMILY_PAIR) {
  inspectContract(
    `RedisLockService (${family.label})`,
    async () => subjectOn(await family.connect(REDIS_URL), 'dlock-inspect-test:'),
    { ttlMs: 2_000, lockWaiters: true },
  );
}

describe('on a cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  for (const family of [CLUSTER_FAMILIES[0], CLUSTER_FAMILIES[3]]) {
    if (!family) continue;
    inspectContract(
      `RedisLockService on a 3-master cluster (${family.label})`,
      async () => subjectOn(await family.connect(cluster.rootNodes), 'dlock-inspect-cl:'),
      { ttlMs: 2_000, lockWaiters: true },
    );
  }
});

describe('RedisLockService inspect', () => {
  it('reads a grant written by an older version (no owner id) with its metadata and without an owner', async () => {
    const family = FAMILY_PAIR[0];
    if (!family) throw new Error('no client family');
    const connected = await family.connect(REDIS_URL);
    const { service, close } = subjectOn(connected, 'dlock-inspect-old:');
    const client = new LockClient(service);
    try {
      const keys = lockKeys('dlock-inspect-old:', 'old');
      const expiry = Date.now() + 5_000;
      await connected.command(['SET', keys.lock, `tok 42 ${expiry} - leader-a`, 'PXAT', String(expiry)]);
      const info = await client.inspect('old');
      expect(info).toMatchObject({ held: true, fencingToken: 42n, metadata: 'leader-a' });
      expect(info.ownerId).toBeUndefined();
      await connected.command(['SET', keys.lock, `tok 43 ${expiry} -`, 'PXAT', String(expiry)]);
      const bare = await client.inspect('old');
      expect(bare).toMatchObject({ held: true, fencingToken: 43n });
      expect(bare.metadata).toBeUndefined();
      await connected.command(['DEL', keys.lock, keys.fence]);
    } finally {
      await client.close();
      await close();
    }
  });
});

it('RedlockService: client.inspect is UnsupportedError (a majority of keys does not say who holds the lock)', async () => {
  const family = FAMILY_PAIR[0];
  if (!family) throw new Error('no client family');
  const connected = await family.connect(REDIS_URL);
  const service = new RedlockService({ clients: [connected.client as RedlockClientLike] });
  const client = new LockClient(service);
  try {
    expect('inspect' in service).toBe(false);
    await expect(client.inspect('a')).rejects.toBeInstanceOf(UnsupportedError);
  } finally {
    await client.close();
    await service.close();
    await connected.close();
  }
});
