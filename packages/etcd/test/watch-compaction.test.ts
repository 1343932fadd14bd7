import { LockClient, type LockHandle } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { startEtcdCluster } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { lockName, waitUntil } from './helpers.js';

// A private one-member cluster: this test compacts its history, which the shared etcd's other tests must not see.

const PREFIX = 'compaction/';

/**
 * A lock held by one service and refused to another (whose watch then starts right after the revision it saw, see
 * EtcdLockService.watch); `releaseAndCompact` releases it and compacts etcd's history before the watch is set up.
 * The watch must still tell its subscriber, and the lock must be free.
 */
async function expectNoticeAfterCompaction(
  label: string,
  releaseAndCompact: (held: LockHandle, etcd: Etcd3) => Promise<void>,
): Promise<void> {
  const cluster = await startEtcdCluster({ size: 1 });
  const etcd = new Etcd3({ hosts: [...cluster.endpoints] });
  const holderService = new EtcdLockService({ client: etcd, keyPrefix: PREFIX });
  const holder = new LockClient(holderService);
  const service = new EtcdLockService({ client: etcd, keyPrefix: PREFIX });
  const locks = new LockClient(service);
  try {
    const name = lockName(label);
    const held = await holder.acquire(name, { ttlMs: 10_000 });
    expect(await locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
    await releaseAndCompact(held, etcd);
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
}

const revisionOf = async (etcd: Etcd3): Promise<string> =>
  (await etcd.kv.range({ key: Buffer.from(PREFIX) })).header.revision;

describe('a release watch whose start revision is compacted away', () => {
  it('tells the subscriber the lock may have become free (a delete in the gap cannot be ruled out)', {
    timeout: 30_000,
  }, async () => {
    await expectNoticeAfterCompaction('compacted-watch', async (held, etcd) => {
      // Released after the refusal, and the history of that release compacted before the watch is set up.
      await held.release();
      // One more write, so that the compaction passes the release's revision (compacting at a revision keeps it).
      await etcd.put(`${PREFIX}other`).value('x');
      await etcd.kv.compact({ revision: await revisionOf(etcd), physical: true });
    });
  });
  it('tells the subscriber when the compaction is exactly at the revision of the release', {
    timeout: 30_000,
  }, async () => {
    await expectNoticeAfterCompaction('compacted-at-release', async (held, etcd) => {
      // The refusal wrote nothing: the service's newest revision is this one, and its watch starts right after it.
      const refusedAt = BigInt(await revisionOf(etcd));
      await held.release();
      const releasedAt = BigInt(await revisionOf(etcd));
      // The release is the one write since: the watch's start revision is the release's.
      expect(releasedAt).toBe(refusedAt + 1n);
      // Compacting at a revision drops a delete at that revision (its tombstone), yet etcd cancels only a watch that
      // starts below it: a watch from exactly here is created and hears nothing.
      await etcd.kv.compact({ revision: releasedAt.toString(), physical: true });
    });
  });
});
