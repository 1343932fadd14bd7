import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { lockName, TEST_PREFIX, waitUntil } from './helpers.js';

// LockService.watch and watchChanges are public and typed () => void, so an async callback type-checks: the promise
// it rejects, left alone, is an unhandled rejection, on which Node ends the process (LockClient catches its own;
// these are the service's, called directly).

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

describe('watch and watchChanges callbacks that return a rejected promise', () => {
  it('leave no unhandled rejection, and the other callbacks still hear', async () => {
    const holderService = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const holder = new LockClient(holderService);
    const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const escaped: unknown[] = [];
    const onEscaped = (error: unknown): void => {
      escaped.push(error);
    };
    process.prependListener('unhandledRejection', onEscaped);
    try {
      const name = lockName('async-watch');
      const held = await holder.acquire(name, { ttlMs: 10_000 });
      // A refused try: the service has just seen a revision, so its watch starts right after it and cannot miss the
      // release below (see EtcdLockService.watch).
      const locks = new LockClient(service);
      expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      let rejected = 0;
      let heard = 0;
      let changed = 0;
      const unwatch = [
        service.watch(name, async () => {
          rejected += 1;
          throw new Error('async watch callback broke');
        }),
        service.watchChanges(name, async () => {
          rejected += 1;
          throw new Error('async change callback broke');
        }),
        service.watch(name, () => {
          heard += 1;
        }),
        service.watchChanges(name, () => {
          changed += 1;
        }),
      ];
      await held.release();
      expect(await waitUntil(() => heard > 0 && changed > 0 && rejected >= 2, 3_000)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(escaped).toEqual([]);
      for (const stop of unwatch) stop();
      await locks.close();
    } finally {
      process.removeListener('unhandledRejection', onEscaped);
      await service.close();
      await holder.close();
      await holderService.close();
    }
  });
});
