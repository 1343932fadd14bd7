import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, expect, it } from 'vitest';
import { lockName, TEST_PREFIX, waitUntil } from './helpers.js';
import { queuedKeys } from './semaphore-helpers.js';

// A queue key's number is this service's to reuse once the key is gone; a permit granted by the enqueue itself
// wrote no queue key, so its number is free at once (else every uncontended acquire used up one number for good).

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

for (const session of [false, true]) {
  it(`queue key numbers are reused after uncontended acquires (${session ? 'session mode' : 'a lease per lock'})`, async () => {
    const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
    const locks = new LockClient(service);
    const name = lockName('numbers');
    const pool = locks.semaphore(name, { permits: 1, ttlMs: 3_000 });
    try {
      for (let i = 0; i < 30; i++) await (await pool.acquire()).release();
      const held = await pool.acquire();
      const waiting = pool.acquire({ waitMs: 5_000 });
      expect(
        await waitUntil(async () => (await queuedKeys(etcd, TEST_PREFIX, name)).length === 1, 3_000),
      ).toBe(true);
      const keys = await queuedKeys(etcd, TEST_PREFIX, name);
      await held.release();
      await (await waiting).release();
      // The waiter's key has the lowest number: 0, as no queue key of this service is left anywhere.
      expect(keys.map((key) => key.split('_').pop())).toEqual(['0']);
    } finally {
      await locks.close();
      await service.close();
    }
  });
}
