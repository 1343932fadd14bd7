import {
  AcquireTimeoutError,
  ClientClosedError,
  InvalidArgumentError,
  LockClient,
  LockLostError,
  type LockService,
  MemoryLockService,
  type Permit,
  PermitsMismatchError,
  UnsupportedError,
} from '@dlock/core';
import { describe, expect, it } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 1_000;

describe('client.semaphore: input', () => {
  it('refuses bad permits, TTLs and option keys before any I/O', async () => {
    const { client, faulty } = harness();
    for (const permits of [0, -1, 1.5, 10_001, Number.NaN, '4', undefined]) {
      expect(() => client.semaphore('pool', { permits, ttlMs: TTL } as never)).toThrow(InvalidArgumentError);
    }
    for (const ttlMs of [0, 9, 1.5, 2 ** 31, undefined]) {
      expect(() => client.semaphore('pool', { permits: 2, ttlMs } as never)).toThrow(InvalidArgumentError);
    }
    expect(() => client.semaphore('pool', { permits: 2, ttlMs: TTL, waitMs: 5 } as never)).toThrow(
      /options\.waitMs is not an option/,
    );
    expect(() => client.semaphore('', { permits: 2, ttlMs: TTL })).toThrow(InvalidArgumentError);
    expect(() => client.semaphore('pool', null as never)).toThrow(InvalidArgumentError);
    const pool = client.semaphore('pool', { permits: 2, ttlMs: TTL });
    await expect(pool.acquire({ waitMS: 100 } as never)).rejects.toThrow(/did you mean "waitMs"/);
    await expect(pool.acquire({ waitMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(pool.acquire({ reentrant: true } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(pool.acquire({ ttlMs: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    // tryAcquire never waits: a wait budget there is a mistake, not something to ignore.
    await expect(pool.tryAcquire({ waitMs: 100 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(pool.withPermit({}, 'not a function' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(faulty.counts.attempted.acquire).toBe(0);
    // A permit-less bad callback took no permit either.
    expect(await pool.available()).toBe(2);
  });

  it('is UnsupportedError on a service that cannot hand out permits', () => {
    const memory = new MemoryLockService();
    const bare: LockService = {
      acquire: (r) => memory.acquire(r),
      renew: (r) => memory.renew(r),
      release: (l) => memory.release(l),
      watch: (n, f) => memory.watch(n, f),
    };
    expect(() => new LockClient(bare).semaphore('pool', { permits: 2, ttlMs: TTL })).toThrow(
      UnsupportedError,
    );
  });
});

describe('permits', () => {
  it('are leases on slots: renewed with the client, fenced per resource, released at once', async () => {
    const { client, makeClient, clock, eventsOf } = harness();
    const pool = client.semaphore('gpu', { permits: 2, ttlMs: TTL });
    const a = await pool.acquire();
    const b = await pool.acquire();
    expect([a.slot, b.slot].sort()).toEqual([0, 1]);
    expect(a.resource).toBe(`gpu#${a.slot}`);
    expect(a.name).toBe('gpu');
    const other = makeClient().semaphore('gpu', { permits: 2, ttlMs: TTL });
    expect(await other.tryAcquire()).toBeNull();
    await clock.advance(TTL * 5);
    expect(a.state).toBe('held');
    expect(b.isHeld()).toBe(true);
    expect(eventsOf('renewed').length).toBeGreaterThanOrEqual(8);
    await a.release();
    expect(a.signal.reason).toMatchObject({ code: 'LOCK_RELEASED' });
    const c = await other.tryAcquire();
    expect(c?.slot).toBe(a.slot);
    expect(c?.fencingToken).toBeGreaterThan(a.fencingToken);
    await Promise.all([b.release(), c?.release()]);
  });

  it('a full semaphore for the whole budget is AcquireTimeoutError saying no permit was free', async () => {
    const { client, makeClient, clock } = harness();
    const held = await client.semaphore('api', { permits: 1, ttlMs: TTL }).acquire();
    const waiting = outcome(
      makeClient().semaphore('api', { permits: 1, ttlMs: TTL }).acquire({ waitMs: 2_000 }),
    );
    await clock.advance(2_100);
    expect(waiting.error).toBeInstanceOf(AcquireTimeoutError);
    expect((waiting.error as AcquireTimeoutError).reason).toBe('no-free-permit');
    expect(String(waiting.error)).toMatch(/semaphore "api" had no free permit/);
    await held.release();
  });

  it('a permit that stops being renewed is lost once (onLost, signal, release rejects), named by its resource', async () => {
    const { client, faulty, clock, eventsOf } = harness({ operationTimeoutMs: 200 });
    const losses: string[] = [];
    const permit = await client
      .semaphore('slots', { permits: 3, ttlMs: TTL })
      .acquire({ onLost: (p, reason) => losses.push(`${(p as Permit).resource}:${reason}`) });
    faulty.partition('fail');
    await clock.advance(TTL * 2);
    expect(permit.state).toBe('lost');
    expect(losses).toEqual([`slots#${permit.slot}:unreachable`]);
    expect(permit.signal.reason).toBeInstanceOf(LockLostError);
    expect(String(permit.signal.reason)).toContain(`"slots#${permit.slot}"`);
    expect(eventsOf('lost')).toHaveLength(1);
    faulty.heal();
    await expect(permit.release()).rejects.toBeInstanceOf(LockLostError);
  });

  it('withPermit rejects with LockLostError when the permit was lost while the function ran', async () => {
    const { client, faulty, clock } = harness({ operationTimeoutMs: 200 });
    const pool = client.semaphore('jobs', { permits: 2, ttlMs: TTL });
    const run = outcome(
      pool.withPermit({}, async () => {
        faulty.partition('fail');
        await clock.sleep(TTL * 2);
        return 'computed without the permit';
      }),
    );
    await clock.advance(TTL * 3);
    expect(run.error).toBeInstanceOf(LockLostError);
    faulty.heal();
  });

  it('close() releases held permits and settles a waiting acquire with ClientClosedError', async () => {
    const { client, makeClient, clock } = harness();
    const pool = client.semaphore('p', { permits: 1, ttlMs: TTL });
    const permit = await pool.acquire();
    const other = makeClient();
    const waiter = outcome(other.semaphore('p', { permits: 1, ttlMs: TTL }).acquire({ waitMs: 10_000 }));
    await clock.advance(50);
    await other.close();
    await clock.advance(0);
    expect(waiter.error).toBeInstanceOf(ClientClosedError);
    await client.close();
    expect(permit.state).toBe('released');
    const fresh = makeClient().semaphore('p', { permits: 1, ttlMs: TTL });
    expect(await fresh.available()).toBe(1);
    expect(() => client.semaphore('p', { permits: 1, ttlMs: TTL })).toThrow(ClientClosedError);
  });

  it('another limit while in use is PermitsMismatchError from the service', async () => {
    const { client, makeClient } = harness();
    const permit = await client.semaphore('m', { permits: 2, ttlMs: TTL }).acquire();
    const wrong = makeClient().semaphore('m', { permits: 5, ttlMs: TTL });
    const error = await wrong.tryAcquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PermitsMismatchError);
    expect(error).toMatchObject({ code: 'PERMITS_MISMATCH', requested: 5, stored: 2, semaphoreName: 'm' });
    await permit.release();
    expect(await wrong.tryAcquire()).not.toBeNull();
  });

  it('a malformed grant from a service (slot out of range) is a TransportError, never a permit', async () => {
    const memory = new MemoryLockService();
    const lying: LockService = {
      acquire: (r) => memory.acquire(r),
      renew: (r) => memory.renew(r),
      release: (l) => memory.release(l),
      watch: (n, f) => memory.watch(n, f),
      acquirePermit: async () => ({
        acquired: true,
        grant: { ownershipToken: 'x', fencingToken: 1n, ttlMs: TTL, slot: 7 },
      }),
      availablePermits: async () => 0,
    };
    const client = new LockClient(lying);
    await expect(client.semaphore('s', { permits: 2, ttlMs: TTL }).tryAcquire()).rejects.toMatchObject({
      code: 'TRANSPORT',
    });
    await client.close();
  });
});

describe('MemoryLockService semaphores', () => {
  it('available() of a semaphore idle since its last lease ran out takes any limit, as acquire does', async () => {
    const { client, makeClient, clock } = harness();
    await client.semaphore('idle', { permits: 2, ttlMs: TTL }).acquire({ renew: false });
    const other = makeClient().semaphore('idle', { permits: 3, ttlMs: TTL });
    await expect(other.available()).rejects.toBeInstanceOf(PermitsMismatchError);
    await clock.advance(TTL + 1);
    expect(await other.available()).toBe(3);
    expect(await other.tryAcquire()).not.toBeNull();
  });
});

describe('a permit gone from the service at release', () => {
  it('rejects with LockLostError named by its resource, as a permit lost while held is', async () => {
    const { client, memory } = harness();
    const permit = await client.semaphore('gone', { permits: 2, ttlMs: TTL }).acquire();
    // Someone else's hand (an operator, a failover) removed the lease: the service's own release says so.
    await memory.release({ ...(permit as unknown as { lease: Parameters<typeof memory.release>[0] }).lease });
    const error = await permit.release().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).lockName).toBe(`gone#${permit.slot}`);
  });
});

describe('a semaphore and a lock of the same name', () => {
  it("a lock's timeout says another owner holds it, not this client, while this client holds a permit of that name", async () => {
    const { client, makeClient, clock } = harness();
    await client.semaphore('shared', { permits: 1, ttlMs: TTL }).acquire();
    await makeClient().acquire('shared', { ttlMs: TTL });
    const waiting = outcome(client.acquire('shared', { ttlMs: TTL, waitMs: 100 }));
    await clock.advance(200);
    expect(waiting.error).toBeInstanceOf(AcquireTimeoutError);
    expect((waiting.error as AcquireTimeoutError).reason).toBe('held-by-another-owner');
  });
});
