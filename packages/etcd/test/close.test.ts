import { performance } from 'node:perf_hooks';
import { ClientClosedError, InvalidArgumentError, LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, rejection } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { lockName, queueLength, TEST_PREFIX, waitUntil } from './helpers.js';

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
