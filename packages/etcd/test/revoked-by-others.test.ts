import { LockClient, LockLostError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, rejection } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { lockName, TEST_PREFIX } from './helpers.js';

// A session lease revoked by someone else (etcdctl lease revoke, a direct LeaseRevoke) takes every key on it. A
// release that comes before any renewal has noticed finds its key gone, as a release sent twice would (etcd3 sends
// a request again after a connection reset): the service must not call it released.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

async function leaseUnder(prefix: string): Promise<string> {
  const { kvs } = await etcd.getAll().prefix(prefix).exec();
  const lease = kvs[0]?.lease;
  if (!lease || lease === '0') throw new Error(`no leased key under ${prefix}`);
  return lease;
}

describe('a session lease revoked by someone else', () => {
  for (const session of [true, { ttlMs: 20_000 }] as const) {
    it(`makes a release that comes before any renewal report the lock, the permit and the leadership lost (session: ${JSON.stringify(session)})`, {
      timeout: 15_000,
    }, async () => {
      const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const [lockKey, semaphore, election] = ['lock', 'sem', 'election'].map((label) =>
        lockName(`revoked-${label}`),
      ) as [string, string, string];
      try {
        const lock = await locks.acquire(lockKey, { ttlMs: 10_000 });
        const permit = await locks.semaphore(semaphore, { permits: 2, ttlMs: 10_000 }).acquire();
        const leadership = await locks.election(election, { ttlMs: 10_000 }).campaign({ value: 'me' });
        const lease = await leaseUnder(`${TEST_PREFIX}${escapeName(lockKey)}/`);
        await etcd.leaseClient.leaseRevoke({ ID: lease });

        expect(await rejection(lock.release())).toBeInstanceOf(LockLostError);
        expect(await rejection(permit.release())).toBeInstanceOf(LockLostError);
        expect(await rejection(leadership.resign())).toBeInstanceOf(LockLostError);
        // And a lock taken after that is on a new session, released as usual.
        const next = await locks.acquire(lockKey, { ttlMs: 10_000 });
        await next.release();
      } finally {
        await locks.close();
        await service.close();
      }
    });
  }
});
