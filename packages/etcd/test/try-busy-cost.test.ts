import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { countingClient, lockName, queueLength, TEST_PREFIX } from './helpers.js';

// With a lease per lock, a try on a held lock granted a lease and revoked it around its one transaction: two extra
// round trips (and lease churn on the cluster) for an answer of "busy". A lock this service last found held by
// someone else is read first; held, the answer needs no lease.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

describe('a try on a held lock with a lease per lock', () => {
  it('costs one read and no lease once the service has found the lock held, and still takes it once free', {
    timeout: 15_000,
  }, async () => {
    const holderService = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const holder = new LockClient(holderService);
    const { client, counts } = countingClient(etcd);
    const service = new EtcdLockService({ client, keyPrefix: TEST_PREFIX });
    const locks = new LockClient(service);
    const name = lockName('busy-try');
    try {
      const held = await holder.acquire(name, { ttlMs: 10_000 });
      // The first try learns the lock is busy the usual way.
      expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      const before = { ...counts, putKeys: counts.putKeys.length };
      for (let i = 0; i < 5; i++) {
        expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
        const refused = await locks
          .acquire(name, { ttlMs: 10_000, waitMs: 0 })
          .catch((error: unknown) => error);
        expect((refused as { code?: string }).code).toBe('ACQUIRE_TIMEOUT');
      }
      // Ten busy answers: a read each, no grant, no revoke, nothing written.
      expect(counts.grant - before.grant).toBe(0);
      expect(counts.revoke - before.revoke).toBe(0);
      expect(counts.enqueue - before.enqueue).toBe(0);
      expect(counts.remove - before.remove).toBe(0);
      expect(counts.recheck - before.recheck).toBe(10);
      expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);

      await held.release();
      const next = await locks.tryAcquire(name, { ttlMs: 10_000 });
      expect(next).not.toBeNull();
      expect(next?.fencingToken).toBeGreaterThan(held.fencingToken);
      await next?.release();
    } finally {
      await locks.close();
      await service.close();
      await holder.close();
      await holderService.close();
    }
  });

  it('is never answered busy from a key of its own service', { timeout: 15_000 }, async () => {
    const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const first = new LockClient(service);
    const second = new LockClient(service);
    const othersService = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const others = new LockClient(othersService);
    const name = lockName('busy-try-own');
    try {
      // Found held by another service once: the next try reads first.
      const theirs = await others.acquire(name, { ttlMs: 10_000 });
      expect(await first.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      await theirs.release();
      const mine = await first.tryAcquire(name, { ttlMs: 10_000 });
      expect(mine).not.toBeNull();
      // Held through this same service: the read shows our key, and the try goes the usual way (busy all the same).
      expect(await second.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      await mine?.release();
      expect(await second.tryAcquire(name, { ttlMs: 10_000 })).not.toBeNull();
    } finally {
      await first.close();
      await second.close();
      await others.close();
      await service.close();
      await othersService.close();
    }
  });
});
