import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { countingClient, lockName, TEST_PREFIX } from './helpers.js';

// A reentrant acquire asking for a longer TTL than the shared lease has makes core renew it through the service.
// etcd cannot change a lease's TTL: the renewal restarts the TTL etcd keeps, and must say so, in one keep-alive.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

/** The lease etcd holds for the key holding `name`: its granted TTL and what is left of it, in ms. */
async function leaseOfLock(name: string): Promise<{ grantedMs: number; leftMs: number }> {
  const { kvs } = await etcd
    .getAll()
    .prefix(`${TEST_PREFIX}${escapeName(name)}/`)
    .exec();
  const lease = kvs[0]?.lease;
  if (!lease) throw new Error(`no key for ${name}`);
  const answer = await etcd.leaseClient.leaseTimeToLive({ ID: lease });
  return { grantedMs: Number(answer.grantedTTL) * 1000, leftMs: Number(answer.TTL) * 1000 };
}

for (const session of [false, true, { ttlMs: 6_000 }] as const) {
  describe(`a reentrant acquire asking for a longer TTL (session: ${JSON.stringify(session)})`, () => {
    it('is told the TTL etcd kept, after one keep-alive and nothing else', async () => {
      const { client, counts } = countingClient(etcd);
      const service = new EtcdLockService({ client, keyPrefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('reentrant-ttl');
      try {
        const first = await locks.acquire(name, { ttlMs: 3_000, reentrant: true });
        const kept = await leaseOfLock(name);
        const before = { ...counts, putKeys: counts.putKeys.length };

        // No longer than the lease: shared as it is, without a request.
        const same = await locks.acquire(name, { ttlMs: 2_000, reentrant: true });
        expect(same).toBe(first);
        expect(counts.keepAlive).toBe(before.keepAlive);

        const longer = await locks.acquire(name, { ttlMs: 30_000, reentrant: true });
        expect(longer).toBe(first);
        expect(longer.isHeld()).toBe(true);
        // What the handle counts on is what etcd keeps: never the 30 s asked for.
        expect(longer.ttlMs).toBeGreaterThan(0);
        expect(longer.ttlMs).toBeLessThanOrEqual(kept.grantedMs);
        const now = await leaseOfLock(name);
        expect(now.grantedMs).toBe(kept.grantedMs);
        expect(longer.expiresAt - performance.now()).toBeLessThanOrEqual(now.leftMs + 1_000);
        // One keep-alive at most (a session may share one sent a moment ago); no grant, no write, no revoke.
        expect(counts.keepAlive - before.keepAlive).toBeLessThanOrEqual(1);
        expect(counts.grant).toBe(before.grant);
        expect(counts.revoke).toBe(before.revoke);
        expect(counts.enqueue).toBe(before.enqueue);
        expect(counts.recheck).toBe(before.recheck);
        expect(counts.remove).toBe(before.remove);

        for (let i = 0; i < 3; i++) await longer.release();
        expect(longer.isHeld()).toBe(false);
        expect(
          (
            await etcd
              .getAll()
              .prefix(`${TEST_PREFIX}${escapeName(name)}/`)
              .keys()
          ).length,
        ).toBe(0);
      } finally {
        await locks.close();
        await service.close();
      }
    });
  });
}
