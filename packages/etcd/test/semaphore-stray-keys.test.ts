import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { lockName, TEST_PREFIX } from './helpers.js';

// Keys under a semaphore's slot prefix that name no slot of its limit (written by some other tool) hold no slot:
// acquire never competes for them, inspect() does not list them, and available() must not count them either.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
const locks = new LockClient(service);

afterAll(async () => {
  await locks.close();
  await service.close();
  etcd.close();
});

describe('keys under the slot prefix that name no slot', () => {
  it('are not counted as held by available(), which agrees with inspect() and with what can be taken', async () => {
    const name = lockName('sem-stray');
    const slots = `${TEST_PREFIX}%sem/${escapeName(name)}/3/s/`;
    const strays = [`${slots}junk`, `${slots}3`, `${slots}01`, `${slots}-1`, `${slots}1/x`];
    try {
      for (const key of strays) await etcd.put(key).value('not a slot').exec();
      const pool = locks.semaphore(name, { permits: 3, ttlMs: 10_000 });
      expect((await pool.inspect()).held).toHaveLength(0);
      expect(await pool.available()).toBe(3);
      const first = await pool.acquire();
      expect((await pool.inspect()).held).toHaveLength(1);
      expect(await pool.available()).toBe(2);
      const second = await pool.tryAcquire();
      const third = await pool.tryAcquire();
      expect(second).not.toBeNull();
      expect(third).not.toBeNull();
      expect(await pool.available()).toBe(0);
      await Promise.all([first.release(), second?.release(), third?.release()]);
      expect(await pool.available()).toBe(3);
    } finally {
      await etcd
        .delete()
        .prefix(`${TEST_PREFIX}%sem/${escapeName(name)}/`)
        .exec();
    }
  });

  it('a slot key holding something other than a permit record is a taken slot, to inspect() as to available()', async () => {
    const name = lockName('sem-foreign-value');
    const slots = `${TEST_PREFIX}%sem/${escapeName(name)}/2/s/`;
    try {
      // Slot 1 exists (acquire's "create only if absent" cannot take it) but holds no record of this package.
      await etcd.put(`${slots}1`).value('not a permit record').exec();
      const pool = locks.semaphore(name, { permits: 2, ttlMs: 10_000 });
      const taken = BigInt((await etcd.get(`${slots}1`).exec()).kvs[0]?.create_revision ?? '0');
      const info = await pool.inspect();
      expect(await pool.available()).toBe(1);
      expect(info.held).toEqual([{ slot: 1, ownerId: '', fencingToken: taken }]);
      const first = await pool.tryAcquire();
      expect(first?.slot).toBe(0);
      expect(await pool.tryAcquire()).toBeNull();
      expect(await pool.available()).toBe(0);
      expect((await pool.inspect()).held.map((holder) => holder.slot)).toEqual([0, 1]);
      await first?.release();
    } finally {
      await etcd
        .delete()
        .prefix(`${TEST_PREFIX}%sem/${escapeName(name)}/`)
        .exec();
    }
  });
});
