import { ClientClosedError, LockClient, type Permit, PermitsMismatchError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, rejection } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import { countingClient, lockName, TEST_PREFIX, waitUntil } from './helpers.js';
import { queuedKeys, semaphoreKeys } from './semaphore-helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.allSettled(cleanups.splice(0).map((fn) => fn()));
});

const TTL_MS = 5_000;

function setup(session: boolean, client: EtcdClientLike = etcd) {
  const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
  const locks = new LockClient(service);
  cleanups.push(async () => {
    await locks.close();
    await service.close();
  });
  return { service, locks };
}

/** Waits until the semaphore has `count` queue keys in etcd. */
async function queued(name: string, count: number): Promise<void> {
  const ok = await waitUntil(async () => (await queuedKeys(etcd, TEST_PREFIX, name)).length === count, 5_000);
  if (!ok) throw new Error(`the queue of "${name}" never reached ${count} waiters`);
}

for (const session of [false, true]) {
  describe(`semaphores (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('holds at most `permits` slots, each key created under its lease with the limit in its value', async () => {
      const { locks } = setup(session);
      const name = lockName('sem-basic');
      const pool = locks.semaphore(name, { permits: 2, ttlMs: TTL_MS });
      const a = await pool.acquire();
      const b = await pool.acquire();
      expect([a.slot, b.slot].sort()).toEqual([0, 1]);
      expect(a.resource).toBe(`${name}#${a.slot}`);
      expect(await pool.tryAcquire()).toBeNull();
      expect(await pool.available()).toBe(0);
      const keys = await semaphoreKeys(etcd, TEST_PREFIX, name);
      const slotKeys = Object.keys(keys).sort();
      expect(slotKeys).toEqual([`${TEST_PREFIX}%sem/${name}/2/s/0`, `${TEST_PREFIX}%sem/${name}/2/s/1`]);
      for (const key of slotKeys) {
        const value = JSON.parse(keys[key] ?? '{}') as Record<string, unknown>;
        expect(value['permits']).toBe(2);
        expect(value['owner']).toBe(locks.ownerId);
        // The token is the slot key's create revision.
        const kv = await etcd.get(key).exec();
        const permit = key.endsWith('/0') ? (a.slot === 0 ? a : b) : a.slot === 1 ? a : b;
        expect(BigInt(kv.kvs[0]?.create_revision ?? '0')).toBe(permit.fencingToken);
      }
      await a.release();
      expect(await pool.available()).toBe(1);
      const c = await pool.tryAcquire();
      expect(c?.slot).toBe(a.slot);
      expect(c?.fencingToken).toBeGreaterThan(a.fencingToken);
      await c?.release();
      await b.release();
      expect(await semaphoreKeys(etcd, TEST_PREFIX, name)).toEqual({});
      expect(await pool.available()).toBe(2);
    });

    it('serves 6 waiters in arrival order, one slot at a time, tokens rising per slot', async () => {
      const { locks } = setup(session);
      const other = setup(session).locks;
      const name = lockName('sem-fifo');
      const pools = [locks, other].map((client) => client.semaphore(name, { permits: 2, ttlMs: TTL_MS }));
      const holders = [await pools[0]!.acquire(), await pools[1]!.acquire()];
      const order: number[] = [];
      const bySlot = new Map<number, bigint[]>();
      for (const h of holders) bySlot.set(h.slot, [h.fencingToken]);
      const waiters: Promise<Permit>[] = [];
      for (let i = 0; i < 6; i++) {
        // Alternating services: the order is etcd's, not one process's.
        const waiter = pools[i % 2]!.acquire({ waitMs: 20_000 }).then((permit) => {
          order.push(i);
          bySlot.get(permit.slot)?.push(permit.fencingToken);
          return permit;
        });
        waiters.push(waiter);
        await queued(name, i + 1);
      }
      const held = [...holders];
      for (let served = 0; served < 6; served++) {
        const next = held.shift();
        await next?.release();
        held.push(await waiters[served]!);
        // Nobody else was served meanwhile.
        expect(order).toEqual([...Array(served + 1).keys()]);
      }
      for (const tokens of bySlot.values()) {
        for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
      }
      await Promise.all(held.map((permit) => permit.release()));
      expect(await semaphoreKeys(etcd, TEST_PREFIX, name)).toEqual({});
    });

    it('tryAcquire never overtakes a queued waiter, even while a slot is free', async () => {
      // The waiter's service holds back its take of a slot (the transaction that deletes its queue key and creates
      // a slot key) until the test lets it go: a slot is then free with a waiter queued.
      let letGo: () => void = () => {};
      const gate = new Promise<void>((resolve) => {
        letGo = resolve;
      });
      let held = 0;
      const gated: EtcdClientLike = {
        ...etcd,
        kv: {
          txn: async (request, options) => {
            const ops = request.success ?? [];
            if (ops.some((op) => op.request_delete_range) && ops.some((op) => op.request_put)) {
              held += 1;
              await gate;
            }
            return etcd.kv.txn(request, options);
          },
        },
        leaseClient: etcd.leaseClient,
        watchClient: etcd.watchClient,
      };
      const name = lockName('sem-no-overtake');
      const pool = setup(session).locks.semaphore(name, { permits: 1, ttlMs: TTL_MS });
      const other = setup(session).locks.semaphore(name, { permits: 1, ttlMs: TTL_MS });
      const holder = await pool.acquire();
      const waiter = setup(session, gated)
        .locks.semaphore(name, { permits: 1, ttlMs: TTL_MS })
        .acquire({ waitMs: 10_000 });
      await queued(name, 1);
      await holder.release();
      expect(await waitUntil(() => held === 1, 5_000)).toBe(true);
      expect(await other.available()).toBe(1);
      expect(await other.tryAcquire()).toBeNull();
      expect(await pool.tryAcquire()).toBeNull();
      letGo();
      const permit = await waiter;
      expect(permit.fencingToken).toBeGreaterThan(holder.fencingToken);
      await permit.release();
      // Nobody waits: tryAcquire takes the free slot.
      const taken = await other.tryAcquire();
      expect(taken?.slot).toBe(0);
      await taken?.release();
    });

    it('200 waiters that abort or time out leave no key behind', { timeout: 30_000 }, async () => {
      const name = lockName('sem-abandoned');
      const holders = [setup(session).locks, setup(session).locks];
      const pools = holders.map((client) => client.semaphore(name, { permits: 1, ttlMs: TTL_MS }));
      const held = await pools[0]!.acquire();
      const watcher = await etcd.watch().prefix(`${TEST_PREFIX}%sem/${name}/1/q/`).create();
      let queuePuts = 0;
      watcher.on('put', () => {
        queuePuts += 1;
      });
      const attempts: Promise<unknown>[] = [];
      for (let i = 0; i < 200; i++) {
        const pool = pools[i % 2]!;
        const delayMs = 100 + ((i * 37) % 500);
        if (i % 4 < 2) {
          const abort = new AbortController();
          setTimeout(() => abort.abort(new Error('gave up')), delayMs);
          attempts.push(rejection(pool.acquire({ waitMs: 10_000, signal: abort.signal })));
        } else {
          attempts.push(rejection(pool.acquire({ waitMs: delayMs })));
        }
      }
      const outcomes = await Promise.all(attempts);
      // They did queue: etcd saw their queue keys written.
      expect(await waitUntil(() => queuePuts >= 100, 2_000)).toBe(true);
      await watcher.cancel();
      expect(outcomes.every((outcome) => outcome instanceof Error)).toBe(true);
      // Only the holder's slot key is left (leaving is immediate; background retries get 2 s).
      const onlyHolder = async () => Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name)).length === 1;
      expect(await waitUntil(onlyHolder, 2_000)).toBe(true);
      expect(Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name))).toEqual([
        `${TEST_PREFIX}%sem/${name}/1/s/0`,
      ]);
      await held.release();
      expect(await semaphoreKeys(etcd, TEST_PREFIX, name)).toEqual({});
      // And the semaphore still works: a waiter is served on a release.
      const next = await pools[1]!.acquire();
      const waiting = pools[0]!.acquire({ waitMs: 5_000 });
      await queued(name, 1);
      await next.release();
      await (await waiting).release();
    });

    it('refuses another limit while in use, accepts one when idle', async () => {
      const { locks } = setup(session);
      const name = lockName('sem-mismatch');
      const two = locks.semaphore(name, { permits: 2, ttlMs: TTL_MS });
      const three = locks.semaphore(name, { permits: 3, ttlMs: TTL_MS });
      const one = locks.semaphore(name, { permits: 1, ttlMs: TTL_MS });
      const held = await two.acquire();
      for (const pool of [three, one]) {
        const error = await rejection(pool.acquire({ waitMs: 1_000 }));
        expect(error).toBeInstanceOf(PermitsMismatchError);
        expect(error).toMatchObject({ code: 'PERMITS_MISMATCH', requested: pool.permits, stored: 2 });
        expect(await rejection(pool.tryAcquire())).toBeInstanceOf(PermitsMismatchError);
        expect(await rejection(pool.available())).toBeInstanceOf(PermitsMismatchError);
      }
      // A waiter alone keeps the limit too.
      const second = await two.acquire();
      const waiting = two.acquire({ waitMs: 10_000 });
      await queued(name, 1);
      await held.release();
      await second.release();
      const third = await waiting;
      expect(await rejection(three.acquire())).toBeInstanceOf(PermitsMismatchError);
      await third.release();
      // Idle: nothing written was left behind, so any limit goes.
      expect(await semaphoreKeys(etcd, TEST_PREFIX, name)).toEqual({});
      const big = await three.acquire();
      expect(await three.available()).toBe(2);
      await big.release();
    });

    it('lives apart from a lock of the same name', async () => {
      const { locks, service } = setup(session);
      const name = lockName('sem-apart');
      const lock = await locks.acquire(name, { ttlMs: TTL_MS });
      const permit = await locks.semaphore(name, { permits: 1, ttlMs: TTL_MS }).acquire();
      expect(lock.isHeld() && permit.isHeld()).toBe(true);
      expect((await service.inspect(name)).held).toBe(true);
      await permit.release();
      await lock.release();
    });

    it('close() ends a queued waiter with ClientClosedError and takes back its keys', async () => {
      const name = lockName('sem-close-waiter');
      const holder = await setup(session).locks.semaphore(name, { permits: 1, ttlMs: TTL_MS }).acquire();
      const { locks, service } = setup(session);
      const waiting = rejection(
        locks.semaphore(name, { permits: 1, ttlMs: TTL_MS }).acquire({ waitMs: 20_000 }),
      );
      await queued(name, 1);
      await service.close();
      expect(await waiting).toBeInstanceOf(ClientClosedError);
      expect(Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name))).toEqual([
        `${TEST_PREFIX}%sem/${name}/1/s/0`,
      ]);
      await holder.release();
    });

    it('rejects every semaphore call after close with ClientClosedError', async () => {
      const { service } = setup(session);
      await service.close();
      const request = {
        name: lockName('sem-closed'),
        ownerId: 'x',
        ttlMs: TTL_MS,
        waitMs: 0,
        signal: new AbortController().signal,
        permits: 1,
      };
      expect(await rejection(service.acquirePermit(request))).toBeInstanceOf(ClientClosedError);
      expect(await rejection(service.availablePermits(request.name, 1))).toBeInstanceOf(ClientClosedError);
    });
  });
}

describe('a session lease revoked behind the service', () => {
  it('reports its permits lost through watchLeases, and the next acquire opens a new session', async () => {
    const granted: string[] = [];
    const recording: EtcdClientLike = {
      kv: etcd.kv,
      watchClient: etcd.watchClient,
      leaseClient: {
        leaseGrant: async (request, options) => {
          const response = await etcd.leaseClient.leaseGrant(request, options);
          granted.push(response.ID);
          return response;
        },
        leaseRevoke: (request, options) => etcd.leaseClient.leaseRevoke(request, options),
        leaseKeepAlive: (options) => etcd.leaseClient.leaseKeepAlive(options),
      },
    };
    const { locks } = setup(true, recording);
    const pool = locks.semaphore(lockName('sem-session-lost'), { permits: 2, ttlMs: 2_000 });
    const lost: string[] = [];
    const permit = await pool.acquire({ onLost: (_permit, reason) => lost.push(reason) });
    await Promise.all(granted.map((ID) => etcd.leaseClient.leaseRevoke({ ID }).catch(() => {})));
    // Told at the next renewal (a third of the TTL), not after the TTL.
    expect(await waitUntil(() => lost.length === 1, 2_000)).toBe(true);
    expect(permit.state).toBe('lost');
    expect(await pool.available()).toBe(2);
    const next = await pool.acquire();
    expect(next.fencingToken).toBeGreaterThan(permit.fencingToken);
    await next.release();
  });
});

describe('requests per uncontended permit', () => {
  for (const session of [false, true]) {
    it(`acquire + release (${session ? 'session mode: 2 transactions' : 'a lease per lock: grant, transaction, revoke'})`, async () => {
      const { client, counts } = countingClient(etcd);
      const { locks } = setup(session, client);
      const pool = locks.semaphore(lockName('sem-count'), { permits: 3, ttlMs: TTL_MS });
      // Warm up: the session lease exists before counting.
      await (await pool.acquire()).release();
      const before = { ...counts };
      for (let i = 0; i < 5; i++) await (await pool.acquire()).release();
      const per = (key: 'enqueue' | 'remove' | 'grant' | 'revoke' | 'recheck') =>
        (counts[key] - before[key]) / 5;
      if (session) expect([per('enqueue'), per('remove'), per('grant'), per('revoke')]).toEqual([1, 1, 0, 0]);
      else expect([per('enqueue'), per('remove'), per('grant'), per('revoke')]).toEqual([1, 0, 1, 1]);
      expect(per('recheck')).toBe(0);
    });

    it(`tries first a slot the last read showed free (${session ? 'session mode' : 'a lease per lock'})`, async () => {
      const name = lockName('sem-guess');
      const elsewhere = await setup(session).locks.semaphore(name, { permits: 2, ttlMs: TTL_MS }).acquire();
      expect(elsewhere.slot).toBe(0);
      const { client, counts } = countingClient(etcd);
      const pool = setup(session, client).locks.semaphore(name, { permits: 2, ttlMs: TTL_MS });
      // Slot 0 is taken by another service: the first guess misses, and the answer shows slot 1 free.
      const first = await pool.acquire();
      expect(first.slot).toBe(1);
      expect(counts.enqueue).toBe(2);
      await first.release();
      const second = await pool.acquire();
      expect(second.slot).toBe(1);
      expect(counts.enqueue).toBe(3);
      await second.release();
      await elsewhere.release();
    });
  }
});
