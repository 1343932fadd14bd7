import { performance } from 'node:perf_hooks';
import { ClientClosedError, InvalidArgumentError, LockClient, LockLostError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, rejection } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { lockName, queueLength, TEST_PREFIX, waitUntil } from './helpers.js';
import { semaphoreKeys } from './semaphore-helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const TTL_MS = 2_000;

const request = (name: string) => ({
  name,
  ownerId: 'close-test',
  ttlMs: TTL_MS,
  waitMs: 0,
  signal: new AbortController().signal,
});

describe('a closed EtcdLockService', () => {
  for (const session of [false, true]) {
    it(`refuses acquires with CLIENT_CLOSED, which a LockClient does not retry (session: ${session})`, async () => {
      const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
      await service.close();
      const direct = await rejection(service.acquire(request(lockName('closed'))));
      expect(direct).toBeInstanceOf(ClientClosedError);
      expect((direct as ClientClosedError).code).toBe('CLIENT_CLOSED');
      const locks = new LockClient(service);
      try {
        const startedAt = performance.now();
        const viaClient = await rejection(
          locks.acquire(lockName('closed'), { ttlMs: TTL_MS, waitMs: 3_000 }),
        );
        expect(viaClient).toBeInstanceOf(ClientClosedError);
        // At once: a TransportError would have been retried until waitMs ran out.
        expect(performance.now() - startedAt).toBeLessThan(1_000);
      } finally {
        await locks.close();
      }
    });
  }

  it('ends a queued acquire with CLIENT_CLOSED and takes its key out of the queue', {
    timeout: 15_000,
  }, async () => {
    const holderService = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX });
    const holder = new LockClient(holderService);
    const waiterService = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX });
    const waiter = new LockClient(waiterService);
    const name = lockName('closed-waiter');
    try {
      const held = await holder.acquire(name, { ttlMs: TTL_MS });
      const queued = rejection(waiter.acquire(name, { ttlMs: TTL_MS, waitMs: 10_000 }));
      expect(await waitUntil(async () => (await queueLength(etcd, TEST_PREFIX, name)) === 2, 3_000)).toBe(
        true,
      );
      await waiterService.close();
      const error = await queued;
      expect(error).toBeInstanceOf(ClientClosedError);
      expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);
      await held.release();
    } finally {
      await waiter.close();
      await holder.close();
      await holderService.close();
    }
  });
});

describe('closing an EtcdLockService under an open LockClient', () => {
  for (const session of [false, true, { ttlMs: 6_000 }] as const) {
    it(`reports its locks and permits lost at once, and leaves no key of them or of its waiters (session: ${JSON.stringify(session)})`, {
      timeout: 15_000,
    }, async () => {
      const othersService = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
      const others = new LockClient(othersService);
      const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX, session });
      const locks = new LockClient(service);
      const [lockKey, semaphore, busyLock, busySemaphore] = ['lock', 'sem', 'busy-lock', 'busy-sem'].map(
        (label) => lockName(`close-open-${label}`),
      ) as [string, string, string, string];
      try {
        const lost: string[] = [];
        locks.events.on('lost', (event) => lost.push(`${event.name} ${event.reason}`));
        // A TTL far longer than the test: a handle left held would stay so until its window closed.
        const lock = await locks.acquire(lockKey, { ttlMs: 20_000 });
        const permit = await locks.semaphore(semaphore, { permits: 1, ttlMs: 20_000 }).acquire();
        const busy = await others.acquire(busyLock, { ttlMs: 20_000 });
        const busyPermit = await others.semaphore(busySemaphore, { permits: 1, ttlMs: 20_000 }).acquire();
        const waiting = rejection(locks.acquire(busyLock, { ttlMs: 20_000, waitMs: 10_000 }));
        const waitingPermit = rejection(
          locks.semaphore(busySemaphore, { permits: 1, ttlMs: 20_000 }).acquire({ waitMs: 10_000 }),
        );
        const queued = async (): Promise<boolean> =>
          (await queueLength(etcd, TEST_PREFIX, busyLock)) === 2 &&
          Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, busySemaphore)).length === 2;
        expect(await waitUntil(queued, 3_000)).toBe(true);

        await service.close();

        // Both kinds of grant are told the same, in every lease mode: the service gave them up.
        expect(lock.isHeld()).toBe(false);
        expect(permit.isHeld()).toBe(false);
        expect(lost.sort()).toEqual([`${lockKey} rejected`, `${semaphore} rejected`].sort());
        expect(await rejection(lock.release())).toBeInstanceOf(LockLostError);
        expect(await rejection(permit.release())).toBeInstanceOf(LockLostError);
        expect(await waiting).toBeInstanceOf(ClientClosedError);
        expect(await waitingPermit).toBeInstanceOf(ClientClosedError);
        // And it is so: nothing of this service is left in etcd, and another client takes both at once.
        expect(await queueLength(etcd, TEST_PREFIX, lockKey)).toBe(0);
        expect(await semaphoreKeys(etcd, TEST_PREFIX, semaphore)).toEqual({});
        expect(await queueLength(etcd, TEST_PREFIX, busyLock)).toBe(1);
        expect(Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, busySemaphore))).toHaveLength(1);
        const next = await others.tryAcquire(lockKey, { ttlMs: 20_000 });
        const nextPermit = await others.semaphore(semaphore, { permits: 1, ttlMs: 20_000 }).tryAcquire();
        expect(next).not.toBeNull();
        expect(nextPermit).not.toBeNull();
        await busy.release();
        await busyPermit.release();
      } finally {
        await locks.close();
        await service.close();
        await others.close();
        await othersService.close();
      }
    });
  }
});

describe('election calls on a closed EtcdLockService', () => {
  it('inspect and updateMetadata reject with CLIENT_CLOSED; change watches end and new ones do nothing', async () => {
    const service = new EtcdLockService({ client: etcd, keyPrefix: TEST_PREFIX });
    const name = lockName('closed-election');
    const result = await service.acquire({ ...request(name), metadata: 'v1' });
    if (!result.acquired) throw new Error('not acquired');
    const lease = { name, ownerId: 'close-test', ...result.grant };
    let changes = 0;
    service.watchChanges(name, () => changes++);
    // Told once when etcd confirms the watch.
    expect(await waitUntil(() => changes === 1, 3_000)).toBe(true);
    await service.close();
    expect(await rejection(service.inspect(name))).toBeInstanceOf(ClientClosedError);
    expect(await rejection(service.updateMetadata(lease, 'v2'))).toBeInstanceOf(ClientClosedError);
    let late = 0;
    const unwatch = service.watchChanges(name, () => late++);
    // A write into the lock's directory after close reaches no one.
    await etcd.put(`${TEST_PREFIX}${name}/someone-else_0`).value('x');
    await etcd.delete().key(`${TEST_PREFIX}${name}/someone-else_0`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(changes).toBe(1);
    expect(late).toBe(0);
    unwatch();
  });
});

describe('EtcdLockService[Symbol.asyncDispose]', () => {
  it('closes the service: its locks are given up, and it refuses further acquires', async () => {
    const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX });
    const name = lockName('disposed');
    const result = await service.acquire(request(name));
    expect(result.acquired).toBe(true);
    expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(1);
    await service[Symbol.asyncDispose]();
    expect(await queueLength(etcd, TEST_PREFIX, name)).toBe(0);
    expect(await rejection(service.acquire(request(name)))).toBeInstanceOf(ClientClosedError);
    // The same promise as close(): disposing twice, or closing after, is a no-op.
    await service[Symbol.asyncDispose]();
    await service.close();
  });
});

describe('EtcdLockService options', () => {
  it('refuses a misspelt option at construction, before any request', () => {
    // Not a literal at the call, so the compiler lets it through, as plain JavaScript would.
    const options = { client: etcd, prefix: TEST_PREFIX, requestTimeout: 500 };
    const error = (() => {
      try {
        new EtcdLockService(options);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('options.requestTimeout');
    expect((error as InvalidArgumentError).message).toContain('"requestTimeoutMs"');
  });
});
