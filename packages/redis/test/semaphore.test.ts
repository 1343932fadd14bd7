import { randomBytes } from 'node:crypto';
import { LockClient, type Permit, PermitsMismatchError, UnsupportedError } from '@dlock/core';
import { REDIS_URL } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, RedlockService, semaphoreKeys, semaphoreSlotKey } from '../src/index.js';
import { FAMILY_PAIR } from './clients.js';
import { commandCalls, connect, disconnect, type Redis, SideRedis, sleep } from './helpers.js';
import { ClientsOf, servesSixWaitersInOrder, subjectOn } from './semaphore-cases.js';

// Semaphores on one Redis server: order, no overtaking, nothing left behind, the stored limit, and what a permit
// costs in server commands however many slots there are. Once with node-redis and once with ioredis.
const PREFIX = 'dlock-sem:';
let admin: Redis;
beforeAll(async () => {
  admin = await connect(REDIS_URL);
});
afterAll(async () => {
  await disconnect(admin);
});

/** Every key of semaphore `name`, sorted. */
async function keysOf(name: string): Promise<string[]> {
  return (await admin.keys(`${PREFIX}{${name}}:sem:*`)).sort();
}

for (const family of FAMILY_PAIR) {
  describe(`semaphores on one server (${family.label})`, () => {
    let subject: ReturnType<typeof subjectOn>;
    const clients = new ClientsOf(() => subject.service);
    let name: string;
    const semaphore = (permits: number, ttlMs = 10_000) => clients.make().semaphore(name, { permits, ttlMs });

    beforeAll(async () => {
      subject = subjectOn(await family.connect(REDIS_URL), PREFIX);
    });
    afterEach(async () => {
      await clients.closeAll();
    });
    afterAll(async () => {
      await subject?.close();
    });
    const fresh = (): string => {
      name = `sem-${randomBytes(5).toString('hex')}`;
      return name;
    };

    it('serves 6 queued waiters in arrival order, one per release', async () => {
      fresh();
      await servesSixWaitersInOrder(() => semaphore(2));
      expect(await keysOf(name)).toEqual([
        semaphoreKeys(PREFIX, name).fence,
        semaphoreKeys(PREFIX, name).slots,
      ]);
    });

    it('tryAcquire takes a free slot when nobody waits, and never overtakes a queued waiter', async () => {
      fresh();
      const a = await semaphore(2).acquire();
      const b = await semaphore(2).tryAcquire();
      expect(b?.slot).toBe(1 - a.slot);
      expect(await semaphore(2).tryAcquire()).toBeNull();
      const waiting = semaphore(2).acquire({ waitMs: 5_000 });
      await sleep(100);
      await a.release();
      // The release handed the slot to the waiter in the same script: there is nothing to take.
      expect(await semaphore(2).tryAcquire()).toBeNull();
      const next = await waiting;
      expect(next.slot).toBe(a.slot);
      await Promise.all([next.release(), b?.release()]);
    });

    it('a slot freed by expiry goes to the queued waiter, not to a tryAcquire', async () => {
      fresh();
      const lapsing = await semaphore(1, 300).acquire({ renew: false });
      const waiting = semaphore(1, 10_000).acquire({ waitMs: 5_000 });
      await sleep(50);
      // Expired, but the head waiter may not have looked yet: whoever looks first hands the slot to it.
      await sleep(300);
      expect(await semaphore(1).tryAcquire()).toBeNull();
      const next = await waiting;
      expect(next.fencingToken).toBeGreaterThan(lapsing.fencingToken);
      await next.release();
    });

    it('200 waiters that give up (abort or deadline) leave nothing behind', async () => {
      fresh();
      const holder = await semaphore(1).acquire();
      const gaveUp: Promise<unknown>[] = [];
      for (let i = 0; i < 200; i++) {
        if (i % 2 === 0) {
          const controller = new AbortController();
          gaveUp.push(
            semaphore(1)
              .acquire({ waitMs: 10_000, signal: controller.signal })
              .catch((error: unknown) => error),
          );
          setTimeout(() => controller.abort(new Error('gave up')), 50 + (i % 7) * 40);
        } else {
          gaveUp.push(
            semaphore(1)
              .acquire({ waitMs: 50 + (i % 5) * 50 })
              .catch((error: unknown) => error),
          );
        }
      }
      const outcomes = await Promise.all(gaveUp);
      expect(outcomes.every((outcome) => outcome instanceof Error)).toBe(true);
      await sleep(100); // clean-ups still in flight
      const { slots, fence } = semaphoreKeys(PREFIX, name);
      expect(await keysOf(name)).toEqual([fence, semaphoreSlotKey(PREFIX, name, 0), slots].sort());
      expect(await semaphore(1).available()).toBe(0);
      await holder.release();
      // Nobody is left to hand the slot to: it is free for a caller that does not wait.
      const next = await semaphore(1).tryAcquire();
      expect(next?.slot).toBe(0);
      await next?.release();
      expect(await keysOf(name)).toEqual([fence, slots]);
    }, 30_000);

    it("a release's hand-on mints above the holder's token when the fence key was lost under it", async () => {
      fresh();
      const { fence } = semaphoreKeys(PREFIX, name);
      // A counter ahead of the server clock: what tokens look like after the clock stepped back by a day.
      const ahead = (BigInt(Date.now()) + 86_400_000n) * 1000n;
      await admin.set(fence, ahead.toString());
      const holder = await semaphore(1).acquire();
      expect(holder.fencingToken).toBe(ahead + 1n);
      const waiting = semaphore(1).acquire({ waitMs: 5_000 });
      await sleep(100);
      // The fence key goes while the slot is held (evicted, or outlived by a long-renewed lease).
      await admin.del(fence);
      await holder.release();
      const next = await waiting;
      expect(next.slot).toBe(holder.slot);
      expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
      await next.release();
    });

    it('a handed-on holder whose lease runs out unreleased leaves no hand-off mark once its slot is handed again', async () => {
      fresh();
      const { waiters } = semaphoreKeys(PREFIX, name);
      const first = await semaphore(1).acquire();
      // Handed the slot by first's release, then gone without releasing (a crashed process): its lease runs out.
      const lapsing = semaphore(1, 300).acquire({ waitMs: 5_000, renew: false });
      await sleep(100);
      await first.release();
      expect((await lapsing).slot).toBe(0);
      const next = await semaphore(1).acquire({ waitMs: 5_000 });
      expect(next.slot).toBe(0);
      // Only the holder's own mark, while it holds (and the hash lives on as long as waiters keep coming).
      const marks = Object.entries(await admin.hGetAll(waiters)).filter(([, value]) => value === '=0');
      expect(marks).toHaveLength(1);
      await next.release();
      const { slots, fence } = semaphoreKeys(PREFIX, name);
      expect(await keysOf(name)).toEqual([fence, slots].sort());
    });

    it('an index that lost track (its key deleted) never makes two holders of one slot', async () => {
      fresh();
      const held = [await semaphore(4).acquire(), await semaphore(4).acquire(), await semaphore(4).acquire()];
      await (held[1] as Permit).release();
      await admin.del(semaphoreKeys(PREFIX, name).slots);
      // Slots 0 and 2 are still held (their keys say so); the next grants find 1 and 3, and then the limit.
      const more = [await semaphore(4).tryAcquire(), await semaphore(4).tryAcquire()];
      expect(more.map((p) => p?.slot).sort()).toEqual([1, 3]);
      expect(await semaphore(4).tryAcquire()).toBeNull();
      expect(await semaphore(4).available()).toBe(0);
      await Promise.all([held[0], held[2], ...more].map((p) => p?.release()));
    });

    it('refuses another limit while in use (PermitsMismatchError) and takes a new one when idle', async () => {
      fresh();
      const held = await semaphore(3).acquire();
      const waiting: Permit[] = [await semaphore(3).acquire(), await semaphore(3).acquire()];
      const queued = semaphore(3).acquire({ waitMs: 5_000 });
      await sleep(50);
      const refused = await semaphore(2)
        .acquire({ waitMs: 1_000 })
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(PermitsMismatchError);
      expect(refused).toMatchObject({
        code: 'PERMITS_MISMATCH',
        semaphoreName: name,
        requested: 2,
        stored: 3,
      });
      await expect(semaphore(4).available()).rejects.toBeInstanceOf(PermitsMismatchError);
      await expect(semaphore(4).tryAcquire()).rejects.toBeInstanceOf(PermitsMismatchError);
      // Holders gone, a waiter still queued: still in use.
      await Promise.all(waiting.map((p) => p.release()));
      await held.release();
      await (await queued).release();
      // Idle: any limit, and the slots start again from 0.
      expect(await semaphore(2).available()).toBe(2);
      const [x, y] = [await semaphore(2).acquire(), await semaphore(2).acquire()];
      expect([x.slot, y.slot].sort()).toEqual([0, 1]);
      expect(await semaphore(2).tryAcquire()).toBeNull();
      await Promise.all([x.release(), y.release()]);
    });
  });
}

describe('RedlockService', () => {
  it('does not hand out permits: client.semaphore throws UnsupportedError', async () => {
    const client = await connect(REDIS_URL);
    const redlock = new RedlockService({ clients: [client] });
    const locks = new LockClient(redlock);
    try {
      expect(() => locks.semaphore('pool', { permits: 2, ttlMs: 1_000 })).toThrow(UnsupportedError);
    } finally {
      await locks.close();
      await redlock.close();
      await disconnect(client);
    }
  });
});

describe('what a permit costs (node-redis 5, on a private server)', () => {
  let side: SideRedis;
  let client: Redis;
  let service: RedisLockService;
  beforeAll(async () => {
    side = await SideRedis.start();
    client = await connect(side.url);
    service = new RedisLockService({ client });
  });
  afterAll(async () => {
    await service?.close();
    await disconnect(client);
    await side?.stop();
  });

  /** Server commands (INFO commandstats: the EVALSHA and every command its script ran) for one acquire + release. */
  async function cycle(name: string, permits: number): Promise<number> {
    const before = await commandCalls(client);
    const result = await service.acquirePermit({
      name,
      ownerId: 'o',
      ttlMs: 30_000,
      waitMs: 0,
      permits,
      signal: new AbortController().signal,
    });
    if (!result.acquired) throw new Error(`${name}: no permit`);
    const { grant } = result;
    await service.release({ name, ownerId: 'o', ...grant });
    const after = await commandCalls(client);
    // The two INFO calls themselves are not the cycle's.
    const count = (calls: Record<string, number>) =>
      Object.entries(calls).reduce((sum, [cmd, n]) => (cmd === 'info' ? sum : sum + n), 0);
    return count(after) - count(before);
  }

  it('an uncontended acquire + release runs the same few commands with 0 or 3,000 of 10,000 slots held', async () => {
    await cycle('empty', 10_000); // opens slot 0 and loads the scripts
    const empty = await cycle('empty', 10_000);
    for (let batch = 0; batch < 6; batch++) {
      const results = await Promise.all(
        Array.from({ length: 500 }, () =>
          service.acquirePermit({
            name: 'busy',
            ownerId: 'o',
            ttlMs: 60_000,
            waitMs: 0,
            permits: 10_000,
            signal: new AbortController().signal,
          }),
        ),
      );
      expect(results.every((r) => r.acquired)).toBe(true);
    }
    await cycle('busy', 10_000); // opens slot 3,000
    const busy = await cycle('busy', 10_000);
    console.log(`semaphore cycle: ${empty} server commands (0 held), ${busy} (3,000 of 10,000 held)`);
    expect(busy).toBe(empty);
    expect(empty).toBeLessThanOrEqual(12);
  }, 30_000);
});
