import { AcquireTimeoutError, LockClient, type LockHandle } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import {
  countingClient,
  lockName,
  queueLength,
  type RequestCounts,
  sleep,
  TEST_PREFIX,
  waitUntil,
} from './helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.allSettled(cleanups.splice(0).map((fn) => fn()));
});

function setup(session: boolean) {
  const { client, counts } = countingClient(etcd);
  const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
  const locks = new LockClient(service);
  cleanups.push(async () => {
    await locks.close();
    await service.close();
  });
  return { service, locks, counts };
}

for (const session of [false, true]) {
  describe(`queue (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('serves 10 queued waiters in FIFO order with increasing tokens', async () => {
      const { locks } = setup(session);
      const name = lockName('fifo');
      const holder = await locks.acquire(name, { ttlMs: 5_000 });
      const order: number[] = [];
      const tokens: bigint[] = [holder.fencingToken];
      const waiters: Promise<void>[] = [];
      for (let i = 0; i < 10; i++) {
        waiters.push(
          locks.acquire(name, { ttlMs: 5_000, waitMs: 30_000 }).then(async (handle) => {
            order.push(i);
            tokens.push(handle.fencingToken);
            await handle.release();
          }),
        );
        // Each waiter's key must be written before the next one starts, so the queue order is known.
        expect(
          await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === i + 2, 5_000),
        ).toBe(true);
      }
      await holder.release();
      await Promise.all(waiters);
      expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
      expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
    });

    it('wakes exactly one of 32 waiters per release (no herd)', async () => {
      const { locks, counts } = setup(session);
      const name = lockName('herd');
      let current = await locks.acquire(name, { ttlMs: 10_000 });
      const abort = new AbortController();
      const handles: LockHandle[] = [];
      let granted = 0;
      const waiters = Array.from({ length: 32 }, () =>
        locks.acquire(name, { ttlMs: 10_000, waitMs: 60_000, signal: abort.signal }).then(
          (handle) => {
            granted += 1;
            handles.push(handle);
          },
          () => {},
        ),
      );
      expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 33, 10_000)).toBe(
        true,
      );
      await sleep(300); // let every waiter's watch be created
      for (let release = 1; release <= 3; release++) {
        const before = counts.recheck;
        await current.release();
        expect(await waitUntil(() => granted === release, 5_000)).toBe(true);
        await sleep(300); // a herd would show up here as more re-reads
        expect(counts.recheck - before).toBe(1);
        expect(granted).toBe(release);
        current = handles[release - 1] as LockHandle;
      }
      abort.abort(new Error('test over'));
      await Promise.all(waiters);
      await current.release();
      // Every abandoned waiter removed its key.
      expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 0, 5_000)).toBe(
        true,
      );
    });

    it('removes the key of a waiter whose wait runs out, and of one that aborts', async () => {
      const { locks } = setup(session);
      const name = lockName('leave');
      const holder = await locks.acquire(name, { ttlMs: 5_000 });
      const timedOut = locks.acquire(name, { ttlMs: 5_000, waitMs: 600 });
      const abort = new AbortController();
      const aborted = locks.acquire(name, { ttlMs: 5_000, waitMs: 30_000, signal: abort.signal });
      aborted.catch(() => {});
      expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 3, 5_000)).toBe(
        true,
      );
      await expect(timedOut).rejects.toBeInstanceOf(AcquireTimeoutError);
      const reason = new Error('caller gave up');
      abort.abort(reason);
      await expect(aborted).rejects.toBe(reason);
      expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 1, 5_000)).toBe(
        true,
      );
      // The queue is not blocked by either: the next contender gets the lock as soon as the holder lets go.
      const next = locks.acquire(name, { ttlMs: 5_000, waitMs: 10_000 });
      await sleep(100);
      await holder.release();
      const handle = await next;
      expect(handle.fencingToken).toBeGreaterThan(holder.fencingToken);
      await handle.release();
    });

    it('keeps a waiter queued longer than its TTL, and grants it a full, fresh window', async () => {
      const { locks } = setup(session);
      const name = lockName('long-wait');
      const holder = await locks.acquire(name, { ttlMs: 2_000 });
      const waiting = locks.acquire(name, { ttlMs: 2_000, waitMs: 15_000 });
      // 1.5 TTLs: the waiter's own lease must be kept alive while it queues, or its key would be gone.
      await sleep(3_000);
      expect(holder.isHeld()).toBe(true);
      expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(2);
      await holder.release();
      const handle = await waiting;
      expect(handle.ttlMs).toBe(2_000);
      // Validity counts from the lease's last refresh during the wait, not from when acquire() was called.
      expect(handle.isHeld()).toBe(true);
      expect(handle.expiresAt - performance.now()).toBeGreaterThan(1_000);
      await handle.release();
    });

    it('costs few requests per uncontended acquire + release', async () => {
      const { locks, counts } = setup(session);
      const name = lockName('cost');
      await (await locks.acquire(name, { ttlMs: 5_000 })).release(); // opens the session in session mode
      const start = { ...counts };
      for (let i = 0; i < 10; i++) await (await locks.acquire(name, { ttlMs: 5_000 })).release();
      const per = (k: Exclude<keyof RequestCounts, 'putKeys'>) => (counts[k] - start[k]) / 10;
      expect(per('enqueue')).toBe(1);
      expect(per('recheck')).toBe(0);
      if (session) {
        // No lease grant per lock: one write, one delete, and a keep-alive sent alongside the write, because a
        // session exactly as long as the lock must be refreshed before it can promise the full TTL again.
        expect(per('grant') + per('revoke')).toBe(0);
        expect(per('remove')).toBe(1);
        expect(per('keepAlive')).toBe(1);
      } else {
        expect(per('grant')).toBe(1);
        expect(per('revoke')).toBe(1);
        expect(per('remove')).toBe(0);
      }
    });
  });
}

describe('session lease longer than the locks', () => {
  it('needs no keep-alive per acquire: one write and one delete', async () => {
    const { client, counts } = countingClient(etcd);
    const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session: { ttlMs: 10_000 } });
    const locks = new LockClient(service);
    cleanups.push(async () => {
      await locks.close();
      await service.close();
    });
    const name = lockName('cost');
    const first = await locks.acquire(name, { ttlMs: 5_000 });
    expect(first.ttlMs).toBeGreaterThanOrEqual(10_000);
    await first.release();
    const start = { ...counts };
    for (let i = 0; i < 10; i++) {
      const handle = await locks.acquire(name, { ttlMs: 5_000 });
      // The grant promises what the session's lease is known to have left, never less than asked for.
      expect(handle.ttlMs).toBeGreaterThanOrEqual(5_000);
      await handle.release();
    }
    expect(counts.enqueue - start.enqueue).toBe(10);
    expect(counts.remove - start.remove).toBe(10);
    expect(counts.grant + counts.revoke + counts.keepAlive + counts.recheck).toBe(
      start.grant + start.revoke + start.keepAlive + start.recheck,
    );
  });
});

describe('key reuse', () => {
  it('writes one key per concurrent contender, not one per acquisition', async () => {
    const { locks, counts } = setup(true);
    const name = lockName('reuse');
    for (let i = 0; i < 20; i++) await (await locks.acquire(name, { ttlMs: 5_000 })).release();
    expect(new Set(counts.putKeys).size).toBe(1);
    const holder = await locks.acquire(name, { ttlMs: 5_000 });
    // Each releases as soon as it gets the lock: their queue order is the order their writes landed, not this one.
    const waiters = [1, 2, 3].map(() =>
      locks.acquire(name, { ttlMs: 5_000, waitMs: 10_000 }).then((handle) => handle.release()),
    );
    expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 4, 5_000)).toBe(true);
    await holder.release();
    await Promise.all(waiters);
    expect(new Set(counts.putKeys).size).toBe(4);
  });

  it('never adopts a key left behind by a failed release: it is removed, and the next token is higher', async () => {
    let failDeletes = false;
    const wrapped: EtcdClientLike = {
      kv: {
        txn: (request, options) => {
          const deletes = (request.success ?? []).some((op) => op.request_delete_range);
          if (failDeletes && deletes) return Promise.reject(new Error('simulated: connection reset'));
          return etcd.kv.txn(request, options);
        },
      },
      leaseClient: etcd.leaseClient,
      watchClient: etcd.watchClient,
    };
    const service = new EtcdLockService({ client: wrapped, prefix: TEST_PREFIX, session: true });
    const locks = new LockClient(service);
    cleanups.push(async () => {
      await locks.close();
      await service.close();
    });
    const name = lockName('stale');
    const first = await locks.acquire(name, { ttlMs: 5_000 });
    failDeletes = true;
    await expect(first.release()).rejects.toThrow(/simulated/);
    failDeletes = false;
    // The session lives on, and so does the key: the lock is still taken in etcd.
    expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);
    const second = await locks.acquire(name, { ttlMs: 5_000 });
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);
    await second.release();
    expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
  });
});
