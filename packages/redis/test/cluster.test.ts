import { LockClient } from '@dlock/core';
import { keySlot, type RedisCluster, startRedisCluster } from '@dlock/test-utils';
import { type ContractSubject, lockServiceContract } from '@dlock/testing/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedisClientLike, RedisLockService } from '../src/index.js';
import { CLUSTER_FAMILIES, type Connected } from './clients.js';

// One real 3-master Redis Cluster (no replicas) for the whole file, started and stopped by test-utils.
let cluster: RedisCluster;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
}, 30_000);
afterAll(async () => {
  await cluster?.stop();
});

const masters = () => cluster.nodes.filter((node) => node.createdAs === 'master');

/** `INFO commandstats` calls per command, summed over every master. */
async function commandCalls(): Promise<Record<string, number>> {
  const calls: Record<string, number> = {};
  for (const node of masters()) {
    const info = String(await cluster.command(node.port, 'INFO', 'commandstats'));
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      calls[match[1] as string] = (calls[match[1] as string] ?? 0) + Number(match[2]);
    }
  }
  return calls;
}

const closeService = async (subject: ContractSubject): Promise<void> => {
  await (subject.service as RedisLockService).close();
};

for (const family of CLUSTER_FAMILIES) {
  lockServiceContract(
    `RedisLockService on a 3-master cluster (${family.label})`,
    async () => {
      const connected = await family.connect(cluster.rootNodes);
      const service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-cluster:',
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
    { fifo: true, closeService },
  );

  describe(`on a 3-master cluster (${family.label})`, () => {
    let connected: Connected;
    let service: RedisLockService;
    let locks: LockClient;
    beforeAll(async () => {
      connected = await family.connect(cluster.rootNodes);
      service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-cl2:',
      });
      locks = new LockClient(service);
    });
    afterAll(async () => {
      await locks?.close();
      await service?.close();
      await connected?.close();
    });

    it('renews 1,000 locks spread over every master with one script call per master', async () => {
      const names = Array.from({ length: 1_000 }, (_, i) => `renew-batch:${family.label}:${i}`);
      const grants = await Promise.all(
        names.map(async (name) => {
          const signal = new AbortController().signal;
          const result = await service.acquire({ name, ownerId: 'o', ttlMs: 30_000, waitMs: 0, signal });
          if (!result.acquired) throw new Error(`${name} not acquired`);
          return { name, grant: result.grant };
        }),
      );
      const slotsUsed = new Set(names.map((name) => keySlot(lockKeys('dlock-cl2:', name).lock))).size;
      expect(slotsUsed).toBeGreaterThan(900); // the names really are spread over the slots (and so the masters)
      const requests = grants.map(({ name, grant }) => ({
        lease: { name, ownerId: 'o', ownershipToken: grant.ownershipToken, fencingToken: grant.fencingToken },
        ttlMs: 30_000,
      }));
      // Once to load the renewal script on every master (a first call is NOSCRIPT, then EVAL): the steady state
      // is what is counted.
      await service.renewMany(requests);
      const before = await commandCalls();
      const results = await service.renewMany(requests);
      const after = await commandCalls();
      expect(results).toHaveLength(1_000);
      expect(results.every((r) => r.renewed)).toBe(true);
      const scripts =
        (after['evalsha'] ?? 0) - (before['evalsha'] ?? 0) + ((after['eval'] ?? 0) - (before['eval'] ?? 0));
      expect(scripts).toBeLessThanOrEqual(masters().length);
      // Each grant written again with its new expiry, which its value states.
      expect((after['set'] ?? 0) - (before['set'] ?? 0)).toBe(1_000);
      await Promise.all(
        grants.map(({ name, grant }) =>
          service.release({
            name,
            ownerId: 'o',
            ownershipToken: grant.ownershipToken,
            fencingToken: grant.fencingToken,
          }),
        ),
      );
    });

    it('a release hands the lock to the queued waiter through sharded pub/sub, not to a newcomer', async () => {
      const name = `handoff:${family.label}`;
      const holder = await locks.acquire(name, { ttlMs: 60_000 });
      const waiting = locks.acquire(name, { ttlMs: 60_000, waitMs: 10_000 });
      // The waiter is queued once its script has run; a probe that does not queue must then be refused.
      await new Promise((resolve) => setTimeout(resolve, 200));
      await holder.release();
      // The release script handed the lock to the waiter only if its notice reached a listener (SPUBLISH > 0);
      // had it reached nobody, the lock would be free and this newcomer would take it for a minute.
      const newcomer = await locks.tryAcquire(name, { ttlMs: 60_000 });
      expect(newcomer).toBeNull();
      const next = await waiting;
      expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
      await next.release();
    });

    it('tells onRelease watchers of a release on the shard that owns the name', async () => {
      const name = `watched:${family.label}`;
      const holder = await locks.acquire(name, { ttlMs: 60_000 });
      const heard = new Promise<string>((resolve) => {
        const stop = locks.onRelease(name, () => {
          stop();
          resolve('released');
        });
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await holder.release();
      const outcome = await Promise.race([heard, new Promise((r) => setTimeout(() => r('silence'), 3_000))]);
      expect(outcome).toBe('released');
    });

    it("a resharding of the lock's slot under contention never hands out a grant twice", async () => {
      const name = `reshard:${family.label}`;
      const slot = keySlot(lockKeys('dlock-cl2:', name).lock);
      const inside = { count: 0, max: 0 };
      const tokens: bigint[] = [];
      let stop = false;
      const worker = async (): Promise<number> => {
        let done = 0;
        while (!stop) {
          try {
            await locks.withLock(name, { ttlMs: 5_000, waitMs: 5_000 }, async (lock) => {
              inside.count++;
              inside.max = Math.max(inside.max, inside.count);
              tokens.push(lock.fencingToken);
              await new Promise((resolve) => setTimeout(resolve, 2));
              inside.count--;
            });
            done++;
          } catch {
            // A call that failed during the move (TRYAGAIN, a timeout) is retried; exclusivity is what is checked.
          }
        }
        return done;
      };
      const workers = Array.from({ length: 4 }, worker);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const from = await cluster.masterOf(lockKeys('dlock-cl2:', name).lock);
      const target = masters().find((node) => node.port !== from.port) as { host: string; port: number };
      await cluster.migrateSlot(slot, target);
      const movedAt = tokens.length;
      await new Promise((resolve) => setTimeout(resolve, 500));
      stop = true;
      const done = await Promise.all(workers);
      expect((await cluster.masterOf(lockKeys('dlock-cl2:', name).lock)).port).toBe(target.port);
      expect(inside.max).toBe(1);
      expect(new Set(tokens).size).toBe(tokens.length);
      for (let i = 1; i < tokens.length; i++)
        expect(tokens[i] as bigint).toBeGreaterThan(tokens[i - 1] as bigint);
      expect(tokens.length).toBeGreaterThan(movedAt); // the lock kept working on its new master
      expect(done.reduce((a, b) => a + b, 0)).toBe(tokens.length);
    }, 30_000);

    it("a waiter queued while its lock's slot moves to another master is woken by the release, not by its recheck", async () => {
      // The old owner unsubscribes the waiter's wake channel when the slot leaves it; ioredis 5 and node-redis 5
      // did not subscribe it again, so the hand-off reached nobody and the waiter slept until the holder's TTL.
      const other = await family.connect(cluster.rootNodes);
      const waiterService = new RedisLockService({
        client: other.client as RedisClientLike,
        keyPrefix: 'dlock-cl2:',
      });
      const waiters = new LockClient(waiterService);
      try {
        const name = `reshard-wake:${family.label}`;
        const key = lockKeys('dlock-cl2:', name).lock;
        const holder = await locks.acquire(name, { ttlMs: 8_000 });
        const waiting = waiters.acquire(name, { ttlMs: 8_000, waitMs: 15_000 });
        await new Promise((resolve) => setTimeout(resolve, 300));
        const from = await cluster.masterOf(key);
        const target = masters().find((node) => node.port !== from.port) as { host: string; port: number };
        await cluster.migrateSlot(keySlot(key), target);
        await new Promise((resolve) => setTimeout(resolve, 500));
        const releasedAt = Date.now();
        await holder.release();
        const next = await waiting;
        const wokenAfterMs = Date.now() - releasedAt;
        await next.release();
        expect(wokenAfterMs).toBeLessThan(2_000);
      } finally {
        await waiters.close();
        await waiterService.close();
        await other.close();
      }
    }, 30_000);
  });
}
