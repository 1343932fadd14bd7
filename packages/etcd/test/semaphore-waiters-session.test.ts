import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, expect, it } from 'vitest';
import { lockName, sleep, TEST_PREFIX, waitUntil } from './helpers.js';
import { queuedKeys } from './semaphore-helpers.js';

// In session mode a semaphore's waiters queue on a session of their own, renewed only while someone waits. Once the
// last waiter is served nobody renews it, so the next waiter can find it close to its end: queued on it as it is,
// its key would go with the session before the first keep-alive of its wait, and with the key its place in line.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

it('a waiter that finds the waiters session near its end keeps its FIFO place', async () => {
  const a = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session: true });
  const b = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session: true });
  const [locksA, locksB] = [new LockClient(a), new LockClient(b)];
  const name = lockName('waiters-session');
  const poolA = locksA.semaphore(name, { permits: 1, ttlMs: 2_000 });
  const poolB = locksB.semaphore(name, { permits: 1, ttlMs: 2_000 });
  try {
    const first = await poolA.acquire();
    const opened = Date.now();
    // Opens A's waiters session (2 s), renewed only while this waiter waits.
    const waiter = poolA.acquire({ waitMs: 5_000 });
    await sleep(200);
    await first.release();
    const held = await waiter;
    // 150 ms before that session's known end, with nobody renewing it.
    await sleep(Math.max(0, 1_850 - (Date.now() - opened)));
    const served: string[] = [];
    const x = poolA.acquire({ waitMs: 8_000 }).then(async (p) => {
      served.push('x');
      await p.release();
    });
    expect(await waitUntil(async () => (await queuedKeys(etcd, TEST_PREFIX, name)).length === 1, 2_000)).toBe(
      true,
    );
    const y = poolB.acquire({ waitMs: 8_000 }).then(async (p) => {
      served.push('y');
      await p.release();
    });
    expect(await waitUntil(async () => (await queuedKeys(etcd, TEST_PREFIX, name)).length === 2, 2_000)).toBe(
      true,
    );
    // Past the old session's end (and etcd's lessor interval): x's key is still first in line.
    await sleep(2_500);
    expect(await queuedKeys(etcd, TEST_PREFIX, name)).toHaveLength(2);
    await held.release();
    await Promise.all([x, y]);
    expect(served).toEqual(['x', 'y']);
  } finally {
    await locksA.close();
    await locksB.close();
    await a.close();
    await b.close();
  }
});
