import { LockClient, type LockHandle } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import type { EtcdClientLike, RequestOpLike, TxnRequestLike } from '../src/client-like.js';
import { lockName, queueLength, TEST_PREFIX, waitUntil } from './helpers.js';
import { queuedKeys, semaphoreKeys } from './semaphore-helpers.js';

// etcd3's default policy sends a request again after a recoverable error (UNAVAILABLE when a connection resets),
// also one etcd had already applied. Simulated here: the first matching request goes to etcd twice, and the service
// sees only the answer to the second copy.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

type Match = {
  txn?: (request: TxnRequestLike) => boolean;
  revoke?: boolean;
  /** Runs after the first copy of a matched transaction is applied, before the second is sent. */
  between?: () => Promise<void>;
};

/** The real client, except that the first request `match` picks (once armed) is applied twice. */
function sentTwice(match: Match, armed = true): { client: EtcdClientLike; arm: () => void } {
  let pending = armed;
  const client: EtcdClientLike = {
    kv: {
      txn: async (request, options) => {
        if (pending && match.txn?.(request)) {
          pending = false;
          await etcd.kv.txn(request, options);
          await match.between?.();
        }
        return etcd.kv.txn(request, options);
      },
    },
    leaseClient: {
      leaseGrant: (request, options) => etcd.leaseClient.leaseGrant(request, options),
      leaseKeepAlive: (options) => etcd.leaseClient.leaseKeepAlive(options),
      leaseRevoke: async (request, options) => {
        if (pending && match.revoke) {
          pending = false;
          await etcd.leaseClient.leaseRevoke(request, options);
        }
        return etcd.leaseClient.leaseRevoke(request, options);
      },
    },
    watchClient: etcd.watchClient,
  };
  return {
    client,
    arm: () => {
      pending = true;
    },
  };
}

/** Every operation of a transaction, its nested transactions' branches included. */
function opsOf(request: TxnRequestLike): RequestOpLike[] {
  return [...(request.success ?? []), ...(request.failure ?? [])].flatMap((op) =>
    op.request_txn ? [op, ...opsOf(op.request_txn)] : [op],
  );
}
/** A semaphore's enqueue: a nested transaction that creates a slot key. */
const isEnter = (t: TxnRequestLike) =>
  (t.success ?? []).some((op) => op.request_txn) && opsOf(t).some((op) => op.request_put);
/** A first waiter's take: deletes its queue key and creates a slot key in one step. */
const isTake = (t: TxnRequestLike) =>
  (t.success ?? []).some((op) => op.request_delete_range) && (t.success ?? []).some((op) => op.request_put);
/** A lock's enqueue. */
const isLockWrite = (t: TxnRequestLike) => (t.success ?? []).some((op) => op.request_put);
/** A release of a session's key: a delete and no put. */
const isDelete = (t: TxnRequestLike) =>
  opsOf(t).some((op) => op.request_delete_range) && !opsOf(t).some((op) => op.request_put);

const slotKeysOf = async (name: string) =>
  Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name)).filter((key) => /\/s\/\d+$/.test(key));

for (const session of [true, false]) {
  describe(`a request applied and sent again (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('a permit granted by an enqueue sent twice holds one slot, and its release leaves no key', async () => {
      const { client } = sentTwice({ txn: isEnter });
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('resent-enter');
      const pool = locks.semaphore(name, { permits: 2, ttlMs: 5_000 });
      try {
        const permit = await pool.acquire({ waitMs: 1_000 });
        const held = await slotKeysOf(name);
        expect(held).toEqual([expect.stringMatching(new RegExp(`/s/${permit.slot}$`))]);
        // The token is the slot key's create revision: the first copy's, the one etcd created it with.
        const [kv] = (
          await etcd
            .getAll()
            .prefix(held[0] ?? '')
            .exec()
        ).kvs;
        expect(BigInt(kv?.create_revision ?? '0')).toBe(permit.fencingToken);
        await permit.release();
        expect(await slotKeysOf(name)).toEqual([]);
        expect(await pool.available()).toBe(2);
      } finally {
        await locks.close();
        await service.close();
      }
    });

    it('a tryAcquire sent twice holds one slot', async () => {
      const { client } = sentTwice({ txn: isEnter });
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('resent-try');
      const pool = locks.semaphore(name, { permits: 3, ttlMs: 5_000 });
      try {
        const permit = await pool.tryAcquire();
        expect(permit).not.toBeNull();
        expect(await slotKeysOf(name)).toHaveLength(1);
        await permit?.release();
        expect(await slotKeysOf(name)).toEqual([]);
      } finally {
        await locks.close();
        await service.close();
      }
    });

    it("a first waiter's take sent twice is granted that slot, and its release leaves no key", async () => {
      const { client, arm } = sentTwice({ txn: isTake }, false);
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('resent-take');
      const pool = locks.semaphore(name, { permits: 1, ttlMs: 5_000 });
      try {
        const first = await pool.acquire();
        arm();
        const waiting = pool.acquire({ waitMs: 5_000 });
        expect(
          await waitUntil(async () => (await queuedKeys(etcd, TEST_PREFIX, name)).length === 1, 3_000),
        ).toBe(true);
        const started = Date.now();
        await first.release();
        const second = await waiting;
        // Granted by that take, not by a fresh claim after losing the place (which would also work, later).
        expect(Date.now() - started).toBeLessThan(2_000);
        expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
        const held = await slotKeysOf(name);
        expect(held).toHaveLength(1);
        const [kv] = (
          await etcd
            .getAll()
            .prefix(held[0] ?? '')
            .exec()
        ).kvs;
        expect(BigInt(kv?.create_revision ?? '0')).toBe(second.fencingToken);
        await second.release();
        expect(await slotKeysOf(name)).toEqual([]);
        expect(await queuedKeys(etcd, TEST_PREFIX, name)).toEqual([]);
      } finally {
        await locks.close();
        await service.close();
      }
    });

    it('a lock whose enqueue was sent twice is held once, and its release leaves no key', async () => {
      const { client } = sentTwice({ txn: isLockWrite });
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('resent-lock');
      try {
        const lock = await locks.acquire(name, { ttlMs: 5_000, waitMs: 1_000 });
        expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);
        await lock.release();
        expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
      } finally {
        await locks.close();
        await service.close();
      }
    });

    it('a waiter whose enqueue was sent twice keeps the place of the first copy, ahead of a later waiter', async () => {
      const name = lockName('resent-place');
      const others = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
      const otherLocks = new LockClient(others);
      const granted: string[] = [];
      let later: Promise<LockHandle> | undefined;
      let queued = false;
      const { client, arm } = sentTwice(
        {
          txn: isLockWrite,
          // B queues after the first copy of A's write was applied, before etcd3 sends it again.
          between: async () => {
            later = otherLocks.acquire(name, { ttlMs: 5_000, waitMs: 10_000 }).then((lock) => {
              granted.push('B');
              return lock;
            });
            queued = await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 3, 3_000);
          },
        },
        false,
      );
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      try {
        const holder = await otherLocks.acquire(name, { ttlMs: 5_000 });
        arm();
        const first = locks.acquire(name, { ttlMs: 5_000, waitMs: 10_000 }).then((lock) => {
          granted.push('A');
          return lock;
        });
        expect(await waitUntil(() => queued, 3_000)).toBe(true);
        const second = later as Promise<LockHandle>;
        // Whatever A's answer to the second copy leads to, its key is written again or kept: three keys.
        expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 3, 3_000)).toBe(
          true,
        );
        await holder.release();
        await Promise.race([first, second]);
        expect(granted).toEqual(['A']);
        const a = await first;
        await a.release();
        const b = await second;
        expect(granted).toEqual(['A', 'B']);
        // A's token is the first copy's create revision, written before B's key.
        expect(a.fencingToken).toBeLessThan(b.fencingToken);
        await b.release();
        expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
      } finally {
        await locks.close();
        await service.close();
        await otherLocks.close();
        await others.close();
      }
    });

    it('a release sent twice resolves, for a permit and for a lock', async () => {
      const { client, arm } = sentTwice(session ? { txn: isDelete } : { revoke: true }, false);
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const name = lockName('resent-release');
      try {
        const permit = await locks.semaphore(name, { permits: 1, ttlMs: 3_000 }).acquire();
        arm();
        await expect(permit.release()).resolves.toBeUndefined();
        expect(await slotKeysOf(name)).toEqual([]);
        const lock = await locks.acquire(name, { ttlMs: 3_000 });
        arm();
        await expect(lock.release()).resolves.toBeUndefined();
        expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
      } finally {
        await locks.close();
        await service.close();
      }
    });
  });
}
