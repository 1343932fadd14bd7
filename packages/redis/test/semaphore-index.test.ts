import { randomBytes } from 'node:crypto';
import { AcquireTimeoutError, LockClient, type Permit, PermitsMismatchError } from '@dlock/core';
import { REDIS_URL } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, semaphoreKeys, semaphoreSlotKey } from '../src/index.js';
import { connect, disconnect, type Redis, sleep } from './helpers.js';

// A semaphore's index (the sorted set that finds a free slot) gone while leases live: it expired (renewals do not
// extend it), or was evicted. The slot keys are the truth: no slot ever gets two holders, nor is a live one freed,
// and what `available` counts and the limit check stay true. node-redis 5 on the shared server.
const PREFIX = `dlock-sem-index-${randomBytes(3).toString('hex')}:`;
let admin: Redis;
let connection: Redis;
const made: LockClient[] = [];
const services: RedisLockService[] = [];

beforeAll(async () => {
  admin = await connect(REDIS_URL);
  connection = await connect(REDIS_URL);
});
afterEach(async () => {
  await Promise.all(made.splice(0).map((client) => client.close()));
  await Promise.all(services.splice(0).map((service) => service.close()));
});
afterAll(async () => {
  const keys = await admin.keys(`${PREFIX}*`);
  if (keys.length > 0) await admin.del(keys);
  await disconnect(connection);
  await disconnect(admin);
});

function serviceWith(fenceRetentionMs?: number): RedisLockService {
  const service = new RedisLockService({
    client: connection,
    keyPrefix: PREFIX,
    ...(fenceRetentionMs === undefined ? {} : { fenceRetentionMs }),
  });
  services.push(service);
  return service;
}

/** Another client per call, as another process would be. */
function clientOn(service: RedisLockService): LockClient {
  const client = new LockClient(service, { operationTimeoutMs: 2_000 });
  made.push(client);
  return client;
}

const fresh = (): string => `s-${randomBytes(5).toString('hex')}`;

/** The fencing token slot `slot`'s key holds ("<who> <token> <expiry> <flags> <permits>"). */
async function tokenIn(name: string, slot: number): Promise<bigint | undefined> {
  const token = (await admin.get(semaphoreSlotKey(PREFIX, name, slot)))?.split(' ')[1];
  return token === undefined ? undefined : BigInt(token);
}

describe('a semaphore whose index is gone while leases live', () => {
  it('with a waiter queued: the next acquire neither hands the held slot to the waiter nor frees it', async () => {
    const service = serviceWith();
    const name = fresh();
    const sem = () => clientOn(service).semaphore(name, { permits: 1, ttlMs: 5_000 });
    const holder = await sem().acquire();
    let heard: Permit | undefined;
    const waiting = sem()
      .acquire({ waitMs: 8_000 })
      .then((permit) => {
        heard = permit;
        return permit;
      });
    waiting.catch(() => {}); // awaited below; a failure above must not leave it unhandled
    await sleep(100);
    await admin.del(semaphoreKeys(PREFIX, name).slots);
    // Any acquire now runs the acquire script with the waiter queued and no index.
    expect(await sem().tryAcquire()).toBeNull();
    await sleep(300);
    expect(heard).toBeUndefined();
    expect(holder.isHeld()).toBe(true);
    expect(await tokenIn(name, 0)).toBe(holder.fencingToken);
    // The holder's release hands the slot on as usual.
    await holder.release();
    const next = await waiting;
    expect(next.slot).toBe(0);
    expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
    await next.release();
  });

  it('with only stale queue entries: the live holder’s slot key is neither deleted nor taken', async () => {
    const service = serviceWith();
    const name = fresh();
    const sem = () => clientOn(service).semaphore(name, { permits: 1, ttlMs: 5_000 });
    const holder = await sem().acquire();
    const { slots, queue, waiters } = semaphoreKeys(PREFIX, name);
    // A waiter whose deadline passed without its leave getting through (its process died).
    await admin.rPush(queue, 'gone');
    await admin.hSet(waiters, 'gone', '1 5000 nobody');
    await admin.del(slots);
    expect(await sem().tryAcquire()).toBeNull();
    expect(holder.isHeld()).toBe(true);
    expect(await tokenIn(name, 0)).toBe(holder.fencingToken);
    await holder.release();
    const next = await sem().tryAcquire();
    expect(next?.slot).toBe(0);
    await next?.release();
  });

  it('run out under a renewed lease (fenceRetentionMs 1 s): a waiter never gets the held slot', async () => {
    const service = serviceWith(1_000);
    const name = fresh();
    const sem = () => clientOn(service).semaphore(name, { permits: 1, ttlMs: 1_000 });
    const holder = await sem().acquire();
    // The index lives the lease plus the retention past the grant (2 s); the holder renews well past that.
    const outcome = await sem()
      .acquire({ waitMs: 3_000 })
      .catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(AcquireTimeoutError);
    expect(holder.isHeld()).toBe(true);
    expect(await sem().available()).toBe(0);
    await holder.release();
  }, 10_000);

  it('with no queue: available() counts the live slot keys, another limit is refused, and the index made again expires', async () => {
    const service = serviceWith();
    const name = fresh();
    const sem = (permits = 2) => clientOn(service).semaphore(name, { permits, ttlMs: 5_000 });
    const held = [await sem().acquire(), await sem().acquire()];
    const { slots } = semaphoreKeys(PREFIX, name);
    await admin.del(slots);
    expect(await sem().available()).toBe(0);
    // The limit the holders were granted under is read from their slot keys.
    await expect(sem(3).available()).rejects.toBeInstanceOf(PermitsMismatchError);
    await expect(sem(3).tryAcquire()).rejects.toMatchObject({ requested: 3, stored: 2 });
    expect(await sem().tryAcquire()).toBeNull();
    // Made again by the refused acquire, with a life of its own.
    expect(await admin.pTTL(slots)).toBeGreaterThan(0);
    await admin.del(slots);
    await Promise.all(held.map((permit) => permit.release()));
    // The releases update an index, never make one (it would have no limit and no life).
    expect(await admin.exists(slots)).toBe(0);
    expect(await sem(3).available()).toBe(3);
    const next = await sem(3).acquire();
    expect(next.slot).toBe(0);
    expect(await admin.pTTL(slots)).toBeGreaterThan(0);
    await next.release();
    expect(await admin.pTTL(slots)).toBeGreaterThan(0);
  });
});
