import type { Permit } from '@dlock/core';
import { keySlot, type RedisCluster, startRedisCluster } from '@dlock/test-utils';
import { semaphoreContract } from '@dlock/testing/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, semaphoreKeys, semaphoreSlotKey } from '../src/index.js';
import { CLUSTER_FAMILIES } from './clients.js';
import { ClientsOf, closeService, servesSixWaitersInOrder, subjectOn } from './semaphore-cases.js';

// Semaphores on one real 3-master Redis Cluster (no replicas), started and stopped by test-utils: the contract, FIFO
// through sharded pub/sub, every key of one semaphore in one slot, and many semaphores spread over the masters. On
// node-redis 6 and ioredis 5 (the two families the project recommends for clusters); the contract on ioredis.
let cluster: RedisCluster;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
}, 30_000);
afterAll(async () => {
  await cluster?.stop();
});

const PREFIX = 'dlock-sem-cl:';
const FAMILIES = CLUSTER_FAMILIES.filter(
  (family) => family.label.startsWith('node-redis 6') || family.label === 'ioredis 5 Cluster',
);
const masters = () => cluster.nodes.filter((node) => node.createdAs === 'master');
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Every key under `pattern` on every master, with the port of the master that holds it. */
async function keysOnMasters(pattern: string): Promise<{ key: string; port: number }[]> {
  const found: { key: string; port: number }[] = [];
  for (const node of masters()) {
    const keys = (await cluster.command(node.port, 'KEYS', pattern)) as string[];
    for (const key of keys) found.push({ key, port: node.port });
  }
  return found;
}

for (const family of FAMILIES) {
  // The contract once (it is the same scripts on either client; the run-time budget goes to the cases below).
  if (family.label === 'ioredis 5 Cluster') {
    semaphoreContract(
      `RedisLockService on a 3-master cluster (${family.label})`,
      async () => subjectOn(await family.connect(cluster.rootNodes), PREFIX),
      { ttlMs: 1_000, expirySlackMs: 300, closeService },
    );
  }

  describe(`semaphores on a 3-master cluster (${family.label})`, () => {
    let subject: ReturnType<typeof subjectOn>;
    const clients = new ClientsOf(() => subject.service);
    const client = () => clients.make();
    beforeAll(async () => {
      subject = subjectOn(await family.connect(cluster.rootNodes), PREFIX);
    });
    afterAll(async () => {
      await clients.closeAll();
      await subject?.close();
    });

    it('keeps every key of one semaphore in one slot, on one master, apart from the lock of the same name', async () => {
      const name = `one-slot:${family.label}`;
      const holders = await Promise.all(
        [0, 1, 2].map(() => client().semaphore(name, { permits: 3, ttlMs: 10_000 }).acquire()),
      );
      const lock = await client().acquire(name, { ttlMs: 10_000 });
      const waiting = client().semaphore(name, { permits: 3, ttlMs: 10_000 }).acquire({ waitMs: 5_000 });
      await sleep(200); // queued: the queue and waiters keys exist now
      const keys = await keysOnMasters(`${PREFIX}{${name}}:sem:*`);
      const { slots, fence, queue, waiters } = semaphoreKeys(PREFIX, name);
      const expected = [
        slots,
        fence,
        queue,
        waiters,
        ...[0, 1, 2].map((i) => semaphoreSlotKey(PREFIX, name, i)),
      ];
      expect(keys.map(({ key }) => key).sort()).toEqual(expected.sort());
      expect(new Set(keys.map(({ key }) => keySlot(key))).size).toBe(1);
      expect(new Set(keys.map(({ port }) => port)).size).toBe(1);
      expect(keys.map(({ key }) => key)).not.toContain(lockKeys(PREFIX, name).lock);
      // The release hands its slot to the waiter through the waiter's sharded wake channel.
      await (holders[1] as Permit).release();
      const next = await waiting;
      expect(next.slot).toBe(1);
      expect(next.fencingToken).toBeGreaterThan((holders[1] as Permit).fencingToken);
      await Promise.all([next, holders[0], holders[2]].map((p) => (p as Permit).release()));
      await lock.release();
    });

    it('serves 6 waiters in arrival order as holders release, one hand-off per release', async () => {
      const name = `fifo:${family.label}`;
      await servesSixWaitersInOrder(() => client().semaphore(name, { permits: 2, ttlMs: 10_000 }));
      expect(await keysOnMasters(`${PREFIX}{${name}}:sem:queue`)).toEqual([]);
    });

    it('acquires and releases permits of semaphores on every master, and renews them with locks in one batch', async () => {
      const names = Array.from({ length: 60 }, (_, i) => `spread:${family.label}:${i}`);
      const owners = new Set<number>();
      for (const name of names) {
        owners.add((await cluster.masterOf(semaphoreKeys(PREFIX, name).slots)).port);
      }
      expect(owners.size).toBe(masters().length);
      const locks = client();
      const permits = await Promise.all(
        names.map((name) => locks.semaphore(name, { permits: 2, ttlMs: 900 }).acquire()),
      );
      const handles = await Promise.all(
        names.slice(0, 20).map((name) => locks.acquire(name, { ttlMs: 900 })),
      );
      // Past the TTL: every permit and lock was kept by the client's batched renewals, on every master.
      await sleep(1_500);
      expect(permits.every((p) => p.isHeld())).toBe(true);
      expect(handles.every((h) => h.isHeld())).toBe(true);
      expect(
        await Promise.all(names.map((name) => locks.semaphore(name, { permits: 2, ttlMs: 900 }).available())),
      ).toEqual(names.map(() => 1));
      await Promise.all([...permits, ...handles].map((h) => h.release()));
      expect(await locks.semaphore(names[0] as string, { permits: 2, ttlMs: 900 }).available()).toBe(2);
    });
  });
}

describe('a resharding of a semaphore’s slot (ioredis 5 Cluster)', () => {
  const family = CLUSTER_FAMILIES.find(
    (f) => f.label === 'ioredis 5 Cluster',
  ) as (typeof CLUSTER_FAMILIES)[number];
  let subject: ReturnType<typeof subjectOn>;
  const clients = new ClientsOf(() => subject.service);
  beforeAll(async () => {
    subject = subjectOn(await family.connect(cluster.rootNodes), PREFIX);
  });
  afterAll(async () => {
    await clients.closeAll();
    await subject?.close();
  });

  it('a script that meets a slot key already moved fails before the queue is touched: no waiter hears of a grant Redis lacks', async () => {
    const name = 'migrating';
    const sem = () => clients.make().semaphore(name, { permits: 1, ttlMs: 10_000 });
    const { slots, queue } = semaphoreKeys(PREFIX, name);
    const slotKey = semaphoreSlotKey(PREFIX, name, 0);
    const holder = await sem().acquire({ renew: false });
    let heard: Permit | undefined;
    const waiting = sem()
      .acquire({ waitMs: 8_000 })
      .then((permit) => {
        heard = permit;
        return permit;
      });
    await sleep(200);
    const source = await cluster.masterOf(slots);
    const target = masters().find((node) => node.port !== source.port) as (typeof cluster.nodes)[number];
    const sourceId = (
      cluster.nodes.find((node) => node.port === source.port) as (typeof cluster.nodes)[number]
    ).id;
    const hashSlot = keySlot(slots);
    // The holder's lease is over and the index says its slot is free (as a lease that ran out looks once
    // `available` has checked it) while the waiter still waits for its turn; the slot key is gone, so while the
    // hash slot is MIGRATING the source no longer serves it.
    await cluster.command(source.port, 'DEL', slotKey);
    await cluster.command(source.port, 'ZADD', slots, 0, '0');
    await cluster.command(target.port, 'CLUSTER', 'SETSLOT', hashSlot, 'IMPORTING', sourceId);
    await cluster.command(source.port, 'CLUSTER', 'SETSLOT', hashSlot, 'MIGRATING', target.id);
    try {
      // Routed to the source (its declared keys are there); the script would hand slot 0 to the waiter.
      const refused = await sem()
        .tryAcquire()
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(Error);
      await sleep(300);
      expect(heard).toBeUndefined();
      expect(await cluster.command(source.port, 'LLEN', queue)).toBe(1);
    } finally {
      await cluster.command(source.port, 'CLUSTER', 'SETSLOT', hashSlot, 'STABLE');
      await cluster.command(target.port, 'CLUSTER', 'SETSLOT', hashSlot, 'STABLE');
    }
    // Once the slot is stable again, the next acquire hands the free slot to the waiter, recorded first.
    expect(await sem().tryAcquire()).toBeNull();
    const next = await waiting;
    expect(next.slot).toBe(0);
    expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
    const value = (await cluster.command(source.port, 'GET', slotKey)) as string;
    expect(value.split(' ').slice(1, 2)).toEqual([String(next.fencingToken)]);
    await next.release();
    await holder.release().catch(() => {});
  });
});
