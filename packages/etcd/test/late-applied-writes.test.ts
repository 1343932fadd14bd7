import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import type { EtcdClientLike, RequestOpLike, TxnRequestLike } from '../src/client-like.js';
import { lockName, queueLength, TEST_PREFIX, waitUntil } from './helpers.js';
import { semaphoreKeys } from './semaphore-helpers.js';

// A write whose call failed without an answer from etcd (its gRPC deadline passed, its connection reset) may still
// be applied: etcd had the proposal already. Simulated here: the first matching write fails at once for the
// service, and reaches etcd only LATE_MS later, after the attempt has given up and taken its keys back once.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const LATE_MS = 400;
/** Time for the clean-up to delete the late key: its retries back off to at most 1 s between tries. */
const CLEANUP_MS = 2_500;

function opsOf(request: TxnRequestLike): RequestOpLike[] {
  return [...(request.success ?? []), ...(request.failure ?? [])].flatMap((op) =>
    op.request_txn ? [op, ...opsOf(op.request_txn)] : [op],
  );
}
const writes = (part: string) => (t: TxnRequestLike) =>
  opsOf(t).some((op) => op.request_put?.key?.toString('latin1').includes(part));

/** The real client, except that the first write `match` picks fails at once and is applied LATE_MS later. */
function appliedLate(match: (request: TxnRequestLike) => boolean): {
  client: EtcdClientLike;
  landed: Promise<void>;
} {
  let pending = true;
  let land = (): void => {};
  const landed = new Promise<void>((resolve) => {
    land = resolve;
  });
  const client: EtcdClientLike = {
    kv: {
      txn: async (request, options) => {
        if (pending && match(request)) {
          pending = false;
          setTimeout(() => {
            etcd.kv
              .txn(request)
              .catch(() => undefined)
              .then(() => land());
          }, LATE_MS);
          throw new Error('4 DEADLINE_EXCEEDED: Deadline exceeded');
        }
        return etcd.kv.txn(request, options);
      },
    },
    leaseClient: etcd.leaseClient,
    watchClient: etcd.watchClient,
  };
  return { client, landed };
}

const request = (name: string, waitMs: number) => ({
  name,
  ownerId: 'late-writes',
  ttlMs: 5_000,
  waitMs,
  signal: new AbortController().signal,
  permits: 1,
});

for (const session of [true, false]) {
  describe(`a write applied after its call failed (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it("a permit's slot key is taken back once it lands", async () => {
      const { client, landed } = appliedLate(writes('/s/'));
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const name = lockName('late-slot');
      try {
        await expect(service.acquirePermit(request(name, 0))).rejects.toThrow(/DEADLINE_EXCEEDED/);
        await landed;
        const empty = async () => Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name)).length === 0;
        expect(await waitUntil(empty, CLEANUP_MS)).toBe(true);
      } finally {
        await service.close();
      }
    });

    it("a waiter's queue key is taken back once it lands", async () => {
      const holder = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
      const { client, landed } = appliedLate(writes('/q/'));
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const name = lockName('late-queue');
      const permit = await new LockClient(holder).semaphore(name, { permits: 1, ttlMs: 5_000 }).acquire();
      try {
        await expect(service.acquirePermit(request(name, 3_000))).rejects.toThrow(/DEADLINE_EXCEEDED/);
        await landed;
        const onlyTheHolder = async () =>
          Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name)).length === 1;
        expect(await waitUntil(onlyTheHolder, CLEANUP_MS)).toBe(true);
        await permit.release();
      } finally {
        await service.close();
        await holder.close();
      }
    });

    it("a lock's key is taken back once it lands", async () => {
      const { client, landed } = appliedLate(() => true);
      const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
      const name = lockName('late-lock');
      try {
        await expect(service.acquire(request(name, 0))).rejects.toThrow(/DEADLINE_EXCEEDED/);
        await landed;
        expect(
          await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 0, CLEANUP_MS),
        ).toBe(true);
      } finally {
        await service.close();
      }
    });
  });
}
