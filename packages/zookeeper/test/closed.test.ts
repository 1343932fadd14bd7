import { ClientClosedError, type Lease } from '@dlock/core';
import { rejection } from '@dlock/test-utils';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { ZooKeeperLockService, ZooKeeperServiceClosedError } from '../src/index.js';
import { FakeZooKeeper } from './fake-zookeeper.js';

describe('after close()', () => {
  it('every call rejects with ClientClosedError (CLIENT_CLOSED), and sends nothing', async () => {
    const clock = new FakeClock();
    const zk = new FakeZooKeeper(3_000);
    const service = new ZooKeeperLockService({ client: zk, clock, root: '/locks' });
    const signal = new AbortController().signal;
    const result = await service.acquire({ name: 'a', ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal });
    if (!result.acquired) throw new Error('not acquired');
    const lease: Lease = { name: 'a', ownerId: 'me', ...result.grant };
    await service.close();
    const sent = zk.calls.length;

    const calls: Promise<unknown>[] = [
      service.acquire({ name: 'b', ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal }),
      service.renew({ lease, ttlMs: 1_000 }),
      service.renewMany([{ lease, ttlMs: 1_000 }]),
      service.release(lease),
    ];
    for (const call of calls) {
      const error = await rejection(call);
      expect(error).toBeInstanceOf(ClientClosedError);
      expect(error).toBeInstanceOf(ZooKeeperServiceClosedError);
      expect(error).toMatchObject({ code: 'CLIENT_CLOSED' });
    }
    const unwatch = service.watch('a', () => {});
    unwatch();
    await service.close(); // idempotent
    await clock.advance(10_000);
    expect(zk.calls.slice(sent)).toEqual([]);
  });
});

describe('a direct caller of the permit calls', () => {
  it('gets InvalidArgumentError for a bad permits value, before anything is sent', async () => {
    const clock = new FakeClock();
    const zk = new FakeZooKeeper(3_000);
    const service = new ZooKeeperLockService({ client: zk, clock, root: '/locks' });
    const signal = new AbortController().signal;
    const sent = zk.calls.length;
    for (const permits of [0, 1.5, 10_001, Number.NaN]) {
      const request = { name: 's', ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal, permits };
      await expect(service.acquirePermit(request)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(service.availablePermits('s', permits)).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
      await expect(service.inspectPermits('s', permits)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(zk.calls.length).toBe(sent);
    await service.close();
  });
});
