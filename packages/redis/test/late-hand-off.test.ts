import { randomBytes } from 'node:crypto';
import { LockClient, type LockHandle } from '@dlock/core';
import { REDIS_URL } from '@dlock/test-utils';
import { Redis as IORedis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService, semaphoreKeys, semaphoreSlotKey } from '../src/index.js';
import { eventually, sleep } from './helpers.js';

// A hand-off message heard only after the grant it announces is over: a waiter's subscriber stalls, the slot (or
// lock) handed to it runs out unrenewed, someone else takes it, and the waiter's own look finds it gone and queues
// again. The message that then arrives must not be taken for a grant. ioredis 5 on the shared server (its socket
// can be paused, which stands in for a subscriber that stalls).
const PREFIX = `dlock-late-${randomBytes(3).toString('hex')}:`;
const connections: IORedis[] = [];
const clients: LockClient[] = [];
const services: RedisLockService[] = [];

async function connection(): Promise<IORedis> {
  const redis = new IORedis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  await redis.connect();
  connections.push(redis);
  return redis;
}

/** The subscriber's socket: paused, it reads nothing, and messages wait in the kernel until it resumes. */
function socketOf(subscriber: IORedis): { pause(): void; resume(): void } {
  return (subscriber as unknown as { stream: { pause(): void; resume(): void } }).stream;
}

/** Two services: A, whose subscriber the test stalls, and B. */
async function services2(): Promise<{ a: RedisLockService; b: RedisLockService; stall: () => () => void }> {
  const subscriber = await connection();
  const a = new RedisLockService({ client: await connection(), subscriber, keyPrefix: PREFIX });
  const b = new RedisLockService({ client: await connection(), keyPrefix: PREFIX });
  services.push(a, b);
  return {
    a,
    b,
    stall: () => {
      socketOf(subscriber).pause();
      return () => socketOf(subscriber).resume();
    },
  };
}

function clientOn(service: RedisLockService): LockClient {
  const client = new LockClient(service, { operationTimeoutMs: 2_000 });
  clients.push(client);
  return client;
}

/** `pending` if it settles within `ms`, else null. */
async function settledWithin<T>(pending: Promise<T>, ms: number): Promise<T | null> {
  return Promise.race([pending, sleep(ms).then(() => null)]);
}

let admin: IORedis;
afterEach(async () => {
  await Promise.allSettled(clients.splice(0).map((client) => client.close()));
  await Promise.allSettled(services.splice(0).map((service) => service.close()));
});
afterAll(async () => {
  admin = await connection();
  const keys = await admin.keys(`${PREFIX}*`);
  if (keys.length > 0) await admin.del(...keys);
  for (const redis of connections) redis.disconnect();
});

describe('a hand-off message heard after the grant it announces ran out', () => {
  it('is ignored by a semaphore waiter that was refused since', async () => {
    const { a, b, stall } = await services2();
    const name = `s-${randomBytes(4).toString('hex')}`;
    const sem = (service: RedisLockService, ttlMs: number) =>
      clientOn(service).semaphore(name, { permits: 1, ttlMs });
    const redis = await connection();
    const { queue, waiters } = semaphoreKeys(PREFIX, name);
    const holder = await sem(b, 5_000).acquire();
    const first = sem(b, 5_000).acquire({ waitMs: 10_000 });
    expect(await eventually(async () => (await redis.llen(queue)) === 1, 2_000)).toBe(true);
    // Second in line (further back than there are slots): it looks again once a second.
    const late = sem(a, 300).acquire({ waitMs: 10_000 });
    late.catch(() => {});
    expect(await eventually(async () => (await redis.llen(queue)) === 2, 2_000)).toBe(true);
    const resume = stall();
    await holder.release();
    await (await first).release(); // handed to `late`, whose process hears nothing; its 300 ms run out
    expect(
      await eventually(async () => (await redis.exists(semaphoreSlotKey(PREFIX, name, 0))) === 0, 1_000),
    ).toBe(true);
    const other = await sem(b, 5_000).tryAcquire();
    expect(other?.slot).toBe(0);
    // `late` looked again (its hand-off was gone) and queued again.
    const requeued = async () =>
      Object.values(await redis.hgetall(waiters)).some((entry) => !entry.startsWith('='));
    expect(await eventually(requeued, 3_000)).toBe(true);
    resume();
    expect(await settledWithin(late, 1_000)).toBeNull();
    expect(other?.isHeld()).toBe(true);
    await other?.release();
    // The next hand-off is taken as usual.
    const next = await settledWithin(late, 2_000);
    expect(next?.slot).toBe(0);
    expect(next?.fencingToken).toBeGreaterThan(other?.fencingToken as bigint);
    await next?.release();
  }, 15_000);

  it('is ignored by a lock waiter that was refused since', async () => {
    const { a, b, stall } = await services2();
    const name = `l-${randomBytes(4).toString('hex')}`;
    const redis = await connection();
    const { lock, queue, waiters } = lockKeys(PREFIX, name);
    const holder = await clientOn(b).acquire(name, { ttlMs: 2_000 });
    const first = clientOn(b).acquire(name, { ttlMs: 300, waitMs: 10_000 });
    expect(await eventually(async () => (await redis.llen(queue)) === 1, 2_000)).toBe(true);
    // Looks again when the holder's lease would end (2 s).
    const late = clientOn(a).acquire(name, { ttlMs: 300, waitMs: 10_000 });
    late.catch(() => {});
    expect(await eventually(async () => (await redis.llen(queue)) === 2, 2_000)).toBe(true);
    const resume = stall();
    await holder.release();
    await (await first).release(); // handed to `late`, whose process hears nothing; its 300 ms run out
    expect(await eventually(async () => (await redis.exists(lock)) === 0, 1_000)).toBe(true);
    const other = (await clientOn(b).tryAcquire(name, { ttlMs: 5_000 })) as LockHandle;
    expect(other).not.toBeNull();
    // `late` looked again (the lock is someone else's) and queued again.
    expect(await eventually(async () => (await redis.hlen(waiters)) === 1, 3_000)).toBe(true);
    resume();
    expect(await settledWithin(late, 1_000)).toBeNull();
    expect(other.isHeld()).toBe(true);
    await other.release();
    const next = await settledWithin(late, 2_000);
    expect(next?.fencingToken).toBeGreaterThan(other.fencingToken);
    await next?.release();
  }, 15_000);
});
