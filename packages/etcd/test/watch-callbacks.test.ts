import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { lockName, TEST_PREFIX, waitUntil } from './helpers.js';

// LockService.watch is public: a subscriber's callback that throws is the caller's bug, and must neither escape
// into the etcd client's stream handler (an unhandled rejection there ends a Node process) nor keep other watches of the
// same service from hearing their releases.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

describe('a release watch whose callback throws', () => {
  it('neither escapes nor silences the other watches of the service', async () => {
    const holderService = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const holder = new LockClient(holderService);
    const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const escaped: unknown[] = [];
    const onEscaped = (error: unknown): void => {
      escaped.push(error);
    };
    process.prependListener('unhandledRejection', onEscaped);
    try {
      const [first, second] = [lockName('throwing-watch'), lockName('quiet-watch')] as [string, string];
      const firstHeld = await holder.acquire(first, { ttlMs: 10_000 });
      const secondHeld = await holder.acquire(second, { ttlMs: 10_000 });
      // Refused tries: the service has just seen a revision, so its watches start right after it and cannot miss
      // the releases below, however late etcd confirms them (see EtcdLockService.watch).
      const locks = new LockClient(service);
      expect(await locks.tryAcquire(first, { ttlMs: 10_000 })).toBeNull();
      expect(await locks.tryAcquire(second, { ttlMs: 10_000 })).toBeNull();
      let thrown = 0;
      let heard = 0;
      const unwatchFirst = service.watch(first, () => {
        thrown += 1;
        throw new Error('subscriber bug');
      });
      const unwatchSecond = service.watch(second, () => {
        heard += 1;
      });
      await firstHeld.release();
      expect(await waitUntil(() => thrown > 0, 3_000)).toBe(true);
      await secondHeld.release();
      expect(await waitUntil(() => heard > 0, 3_000)).toBe(true);
      expect(escaped).toEqual([]);
      unwatchFirst();
      unwatchSecond();
      await locks.close();
    } finally {
      process.removeListener('unhandledRejection', onEscaped);
      await service.close();
      await holder.close();
      await holderService.close();
    }
  });
});
