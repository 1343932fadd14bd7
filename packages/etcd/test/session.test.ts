import { LockClient, type LockHandle, type LostReason } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { countingClient, lockName, sleep, TEST_PREFIX, waitUntil } from './helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

/** The lease a lock's holder key is attached to, read from etcd. */
async function leaseOf(name: string): Promise<string> {
  const result = await etcd
    .getAll()
    .prefix(`${TEST_PREFIX}${escapeName(name)}/`)
    .exec();
  const lease = result.kvs[0]?.lease;
  if (!lease) throw new Error(`no key for ${name}`);
  return lease;
}

describe('session mode', () => {
  it('reports every lock of a revoked session Lost at once, and the next acquire opens a new session', {
    timeout: 20_000,
  }, async () => {
    const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session: true });
    const locks = new LockClient(service);
    try {
      const lost: { name: string; reason: LostReason; at: number }[] = [];
      const names = Array.from({ length: 5 }, () => lockName('session-lost'));
      const handles: LockHandle[] = [];
      for (const name of names) {
        handles.push(
          await locks.acquire(name, {
            ttlMs: 2_000,
            onLost: (_h, reason) => lost.push({ name, reason, at: performance.now() }),
          }),
        );
      }
      const leases = new Set(await Promise.all(names.map(leaseOf)));
      expect(leases.size).toBe(1);
      const session = [...leases][0] as string;
      await etcd.leaseClient.leaseRevoke({ ID: session });
      // The next renewal (a third of the TTL) hears "lease not found", and watchLeases ends all five together.
      expect(await waitUntil(() => lost.length === 5, 3_000)).toBe(true);
      expect(lost.every((l) => l.reason === 'rejected')).toBe(true);
      const times = lost.map((l) => l.at);
      expect(Math.max(...times) - Math.min(...times)).toBeLessThan(50);
      expect(handles.every((h) => h.state === 'lost')).toBe(true);
      const next = await locks.acquire(names[0] as string, { ttlMs: 2_000 });
      expect(await leaseOf(names[0] as string)).not.toBe(session);
      expect(next.fencingToken).toBeGreaterThan(handles[0]?.fencingToken ?? 0n);
      await next.release();
    } finally {
      await locks.close();
      await service.close();
    }
  });

  it('keeps 200 locks alive with a handful of keep-alives, not one per lock', {
    timeout: 20_000,
  }, async () => {
    const { client, counts } = countingClient(etcd);
    const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session: true });
    const locks = new LockClient(service);
    try {
      const handles = await Promise.all(
        Array.from({ length: 200 }, () => locks.acquire(lockName('many'), { ttlMs: 2_000 })),
      );
      const before = counts.keepAlive;
      await sleep(3_000); // four to five renewal intervals of every lock
      const keepAlives = counts.keepAlive - before;
      expect(handles.every((h) => h.isHeld())).toBe(true);
      // A lease per lock would need 200 × ~4.5 = ~900 here. One shared keep-alive answers every renewal sent
      // within a sixth of the TTL of it: at most ~9 in 3 s, plus slack for a busy machine.
      expect(keepAlives).toBeGreaterThan(0);
      expect(keepAlives).toBeLessThanOrEqual(15);
      await Promise.all(handles.map((h) => h.release()));
    } finally {
      await locks.close();
      await service.close();
    }
  });
});
