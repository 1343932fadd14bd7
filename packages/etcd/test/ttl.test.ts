import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { lockName, TEST_PREFIX } from './helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

/** The TTL etcd granted the lease of the key holding `name`. */
async function grantedTtl(name: string): Promise<number> {
  const { kvs } = await etcd
    .getAll()
    .prefix(`${TEST_PREFIX}${escapeName(name)}/`)
    .exec();
  const lease = kvs[0]?.lease;
  if (!lease) throw new Error(`no key for ${name}`);
  return Number((await etcd.leaseClient.leaseTimeToLive({ ID: lease })).grantedTTL);
}

for (const session of [false, true]) {
  describe(`TTL rounding (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('rounds up to whole seconds, and reports what etcd granted (it raises TTLs under 2 s to 2 s)', async () => {
      const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      try {
        const rounded = await locks.acquire(lockName('ttl'), { ttlMs: 2_500 });
        expect(rounded.ttlMs).toBeGreaterThanOrEqual(3_000);
        expect(rounded.ttlMs).toBeLessThan(3_100);
        const raised = await locks.acquire(lockName('ttl'), { ttlMs: 500 });
        expect(raised.ttlMs).toBeGreaterThanOrEqual(2_000);
        expect(raised.ttlMs).toBeLessThan(2_100);
        // The lease etcd holds agrees: what the client counts on is no longer than what the server keeps.
        expect(await grantedTtl(rounded.name)).toBe(3);
        expect(await grantedTtl(raised.name)).toBe(2);
        await rounded.release();
        await raised.release();
      } finally {
        await locks.close();
        await service.close();
      }
    });
  });
}
