import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { startEtcdCluster } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { lockName, waitUntil } from './helpers.js';

// A private one-member cluster: this test compacts its history, which the shared etcd's other tests must not see.

describe('a release watch whose start revision is compacted away', () => {
  it('tells the subscriber the lock may have become free (a delete in the gap cannot be ruled out)', {
    timeout: 30_000,
  }, async () => {
    const cluster = await startEtcdCluster({ size: 1 });
    const etcd = new Etcd3({ hosts: [...cluster.endpoints] });
    const holderService = new EtcdLockService({ client: etcd, keyPrefix: 'compaction/' });
    const holder = new LockClient(holderService);
    const service = new EtcdLockService({ client: etcd, keyPrefix: 'compaction/' });
    const locks = new LockClient(service);
    try {
      const name = lockName('compacted-watch');
      const held = await holder.acquire(name, { ttlMs: 10_000 });
      // Refused: the service saw a revision just now, and a watch starts right after it (see EtcdLockService.watch).
      expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      // Released after the refusal, and the history of that release compacted before the watch is set up.
      await held.release();
      // One more write, so that the compaction passes the release's revision (compacting at a revision keeps it).
      await etcd.put('compaction/other').value('x');
      const revision = (await etcd.kv.range({ key: Buffer.from('compaction/') })).header.revision;
      await etcd.kv.compact({ revision, physical: true });
      let notices = 0;
      const unwatch = locks.onRelease(name, () => {
        notices += 1;
      });
      try {
        expect(await waitUntil(() => notices > 0, 3_000)).toBe(true);
      } finally {
        unwatch();
      }
      // And it is free.
      const next = await locks.tryAcquire(name, { ttlMs: 10_000 });
      expect(next).not.toBeNull();
      await next?.release();
    } finally {
      await locks.close();
      await service.close();
      await holder.close();
      await holderService.close();
      etcd.close();
      await cluster.stop();
    }
  });
  it('tells the subscriber when the compaction is exactly at the revision of the release', {
    timeout: 30_000,
  }, async () => {
    const cluster = await startEtcdCluster({ size: 1 });
    const etcd = new Etcd3({ hosts: [...cluster.endpoints] });
    const holderService = new EtcdLockService({ client: etcd, keyPrefix: 'compaction/' });
    const holder = new LockClient(holderService);
    const service = new EtcdLockService({ client: etcd, keyPrefix: 'compaction/' });
    const locks = new LockClient(service);
    try {
      const name = lockName('compacted-at-release');
      const held = await holder.acquire(name, { ttlMs: 10_000 });
      expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
      // The refusal wrote nothing: the service's newest revision is this one, and its watch starts right after it.
      const refusedAt = BigInt((await etcd.kv.range({ key: Buffer.from('compaction/') })).header.revision);
      await held.release();
      const releasedAt = BigInt((await etcd.kv.range({ key: Buffer.from('compaction/') })).header.revision);
      // The release is the one write since: the watch's start revision is the release's.
      expect(releasedAt).toBe(refusedAt + 1n);
      // Compacting at a revision drops a delete at that revision (its tombstone), yet etcd cancels only a watch that
      // starts below it: a watch from exactly here is created and hears nothing.
      await etcd.kv.compact({ revision: releasedAt.toString(), physical: true });
      let notices = 0;
      const unwatch = locks.onRelease(name, () => {
        notices += 1;
      });
      try {
        expect(await waitUntil(() => notices > 0, 3_000)).toBe(true);
      } finally {
        unwatch();
      }
      const next = await locks.tryAcquire(name, { ttlMs: 10_000 });
      expect(next).not.toBeNull();
      await next?.release();
    } finally {
      await locks.close();
      await service.close();
      await holder.close();
      await holderService.close();
      etcd.close();
      await cluster.stop();
    }
  });
});
