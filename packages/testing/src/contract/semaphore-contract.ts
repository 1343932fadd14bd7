import { randomBytes } from 'node:crypto';
import {
  AcquireTimeoutError,
  type Clock,
  LockClient,
  LockLostError,
  type LockService,
  type Permit,
  PermitsMismatchError,
  systemClock,
} from '@dlock/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ContractSubject } from './lock-service-contract.js';

/** Tunes {@link semaphoreContract} to a service's leases and clock. */
export interface SemaphoreContractOptions {
  /** The permits' lease in ms. Default 2,000 (etcd's leases are whole seconds, at least 2). */
  readonly ttlMs?: number;
  /** Extra time after a TTL before a lease must be gone (services expire lazily or on a tick). Default 500. */
  readonly expirySlackMs?: number;
  /** How the suite lets time pass. Default: real time. */
  readonly sleep?: (ms: number) => Promise<void>;
  /** The clock given to the suite's `LockClient`s. Default `systemClock`. */
  readonly clock?: Clock;
  /** Closes the service (not the connections): calls after it must reject with `ClientClosedError`. */
  readonly closeService?: (subject: ContractSubject) => Promise<void>;
  /** Per-test timeout for vitest, ms. Default 30_000. */
  readonly testTimeoutMs?: number;
}

const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The behaviour every service that hands out permits (`acquirePermit`, `availablePermits`, permit leases in
 * renew/release) must give to core's `Semaphore`, as a vitest suite run against the real server. Each test makes its
 * own clients, as separate processes would be.
 */
export function semaphoreContract(
  label: string,
  makeSubject: () => Promise<ContractSubject> | ContractSubject,
  options: SemaphoreContractOptions = {},
): void {
  const ttlMs = options.ttlMs ?? 2_000;
  const slackMs = options.expirySlackMs ?? 500;
  const sleep = options.sleep ?? realSleep;
  const clock = options.clock ?? systemClock;
  const timeout = options.testTimeoutMs ?? 30_000;

  describe(`Semaphore contract: ${label}`, () => {
    let subject: ContractSubject;
    let service: LockService;
    let name: string;
    const clients: LockClient[] = [];
    const client = (): LockClient => {
      const made = new LockClient(service, { operationTimeoutMs: 5_000, clock });
      clients.push(made);
      return made;
    };
    /** Each call is another process: its own client, so no two permits share an owner. */
    const semaphore = (permits: number, ttl = ttlMs) => client().semaphore(name, { permits, ttlMs: ttl });

    beforeEach(async () => {
      subject = await makeSubject();
      service = subject.service;
      name = `semaphore-${randomBytes(6).toString('hex')}`;
    });

    afterEach(async () => {
      await Promise.all(clients.splice(0).map((c) => c.close()));
      await subject.close?.();
    });

    it('admits at most `permits` holders, each on its own slot, and counts the free ones', {
      timeout,
    }, async () => {
      expect(await semaphore(3).available()).toBe(3);
      const held: Permit[] = [];
      for (let i = 0; i < 3; i++) {
        const permit = await semaphore(3).tryAcquire();
        expect(permit).not.toBeNull();
        if (permit) held.push(permit);
      }
      expect(new Set(held.map((p) => p.slot))).toEqual(new Set([0, 1, 2]));
      for (const permit of held) {
        expect(permit.name).toBe(name);
        expect(permit.resource).toBe(`${name}#${permit.slot}`);
        expect(typeof permit.fencingToken).toBe('bigint');
        expect(permit.state).toBe('held');
        expect(permit.isHeld()).toBe(true);
      }
      expect(await semaphore(3).tryAcquire()).toBeNull();
      expect(await semaphore(3).available()).toBe(0);
      await held[1]?.release();
      expect(held[1]?.state).toBe('released');
      expect(await semaphore(3).available()).toBe(1);
      const again = await semaphore(3).tryAcquire();
      expect(again?.slot).toBe(held[1]?.slot);
      await Promise.all([...held, again].map((p) => p?.release()));
      expect(await semaphore(3).available()).toBe(3);
    });

    it("raises each slot's fencing token from one holder to the next", { timeout }, async () => {
      const last = new Map<number, bigint>();
      for (let round = 0; round < 4; round++) {
        const permits = await Promise.all([
          semaphore(2).acquire({ waitMs: 2_000 }),
          semaphore(2).acquire({ waitMs: 2_000 }),
        ]);
        for (const permit of permits) {
          const before = last.get(permit.slot);
          if (before !== undefined) expect(permit.fencingToken).toBeGreaterThan(before);
          last.set(permit.slot, permit.fencingToken);
        }
        await Promise.all(permits.map((p) => p.release()));
      }
      expect([...last.keys()].sort()).toEqual([0, 1]);
    });

    it('serves waiters in arrival order, waking one per release', { timeout }, async () => {
      const holders = [await semaphore(2).acquire(), await semaphore(2).acquire()];
      const order: number[] = [];
      const waiters: Promise<Permit>[] = [];
      for (let i = 0; i < 4; i++) {
        const waiter = semaphore(2).acquire({ waitMs: 20_000 });
        waiters.push(
          waiter.then((permit) => {
            order.push(i);
            return permit;
          }),
        );
        // Arrival order is the service's; give each request time to reach it before the next.
        await sleep(150);
      }
      expect(order).toEqual([]);
      const released: Permit[] = [...holders];
      for (let served = 0; served < 4; served++) {
        await released[served]?.release();
        const permit = await waiters[served];
        if (!permit) throw new Error('no permit');
        expect(order).toEqual([...Array(served + 1).keys()]);
        released.push(permit);
      }
      await Promise.all(released.slice(4).map((p) => p.release()));
    });

    it('tryAcquire never overtakes a queued waiter; a freed permit goes to the waiter', {
      timeout,
    }, async () => {
      const holder = await semaphore(1).acquire();
      const waiting = semaphore(1).acquire({ waitMs: 20_000 });
      await sleep(200);
      expect(await semaphore(1).tryAcquire()).toBeNull();
      await holder.release();
      const next = await waiting;
      expect(next.slot).toBe(0);
      expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
      expect(await semaphore(1).tryAcquire()).toBeNull();
      await next.release();
      const free = await semaphore(1).tryAcquire();
      expect(free).not.toBeNull();
      await free?.release();
    });

    it('a waiter that times out or is aborted leaves nothing behind', { timeout }, async () => {
      const holder = await semaphore(1).acquire();
      const started = Date.now();
      const timedOut = await semaphore(1)
        .acquire({ waitMs: 300 })
        .catch((e: unknown) => e);
      expect(timedOut).toBeInstanceOf(AcquireTimeoutError);
      expect((timedOut as AcquireTimeoutError).reason).toBe('no-free-permit');
      expect(Date.now() - started).toBeLessThan(5_000);
      const controller = new AbortController();
      const aborted = semaphore(1).acquire({ waitMs: 20_000, signal: controller.signal });
      await sleep(150);
      controller.abort(new Error('gave up'));
      await expect(aborted).rejects.toThrow('gave up');
      await holder.release();
      // Nobody is left in the queue: the freed permit can be taken without waiting. An aborted call settles at once
      // and its queue entry is removed right after (in the background), so allow that one round trip, and no more
      // than a second: a leftover entry would refuse every tryAcquire until its lease ran out.
      let next: Permit | null = null;
      const freedAt = Date.now();
      while (next === null && Date.now() - freedAt < 1_000) {
        next = await semaphore(1).tryAcquire();
        if (next === null) await sleep(20);
      }
      expect(next).not.toBeNull();
      await next?.release();
      expect(await semaphore(1).available()).toBe(1);
    });

    it('refuses another limit while in use, and takes a new one when idle', { timeout }, async () => {
      const holder = await semaphore(2).acquire();
      await expect(semaphore(3).tryAcquire()).rejects.toBeInstanceOf(PermitsMismatchError);
      await expect(semaphore(3).acquire({ waitMs: 500 })).rejects.toMatchObject({
        code: 'PERMITS_MISMATCH',
        requested: 3,
        stored: 2,
      });
      await expect(semaphore(1).available()).rejects.toBeInstanceOf(PermitsMismatchError);
      await holder.release();
      const bigger = await semaphore(3).tryAcquire();
      expect(bigger).not.toBeNull();
      expect(await semaphore(3).available()).toBe(2);
      await bigger?.release();
    });

    it('keeps a renewed permit past its TTL', { timeout }, async () => {
      const permit = await semaphore(1).acquire();
      await sleep(ttlMs * 2 + slackMs);
      expect(permit.state).toBe('held');
      expect(await semaphore(1).tryAcquire()).toBeNull();
      await permit.release();
    });

    it('frees an unrenewed permit after its TTL: the next holder gets the slot with a higher token', {
      timeout,
    }, async () => {
      const first = await semaphore(1).acquire({ renew: false });
      await sleep(ttlMs + slackMs);
      const next = await semaphore(1).acquire({ waitMs: 5_000 });
      expect(next.slot).toBe(0);
      expect(next.fencingToken).toBeGreaterThan(first.fencingToken);
      await expect(first.release()).rejects.toBeInstanceOf(LockLostError);
      await next.release();
    });

    it('a waiter gets a permit freed by expiry, without a release', { timeout }, async () => {
      const first = await semaphore(1).acquire({ renew: false });
      const next = await semaphore(1).acquire({ waitMs: ttlMs * 3 + 5_000 });
      // The slot went to the waiter only once the first holder's window had closed, never while it was valid.
      expect(first.isHeld()).toBe(false);
      expect(next.fencingToken).toBeGreaterThan(first.fencingToken);
      await next.release();
    });

    it('lives apart from a lock of the same name', { timeout }, async () => {
      const lock = await client().acquire(name, { ttlMs });
      const permit = await semaphore(1).tryAcquire();
      expect(permit).not.toBeNull();
      await permit?.release();
      expect(lock.state).toBe('held');
      await lock.release();
    });

    it('withPermit releases after the function, also when it throws', { timeout }, async () => {
      const sem = semaphore(1);
      const slot = await sem.withPermit({ waitMs: 1_000 }, async (permit) => {
        expect(permit.isHeld()).toBe(true);
        return permit.slot;
      });
      expect(slot).toBe(0);
      await expect(
        sem.withPermit({}, async () => {
          throw new Error('job failed');
        }),
      ).rejects.toThrow('job failed');
      expect(await sem.available()).toBe(1);
    });

    it('renews many permits and locks in one batch', { timeout }, async () => {
      const c = client();
      const sem = c.semaphore(name, { permits: 5, ttlMs });
      const permits = await Promise.all([...Array(5)].map(() => sem.acquire({ waitMs: 2_000 })));
      const lock = await c.acquire(`${name}-lock`, { ttlMs });
      await sleep(ttlMs * 2 + slackMs);
      expect(permits.map((p) => p.state)).toEqual(Array(5).fill('held'));
      expect(lock.state).toBe('held');
      expect(await semaphore(5).available()).toBe(0);
      await Promise.all([...permits, lock].map((h) => h.release()));
    });

    if (options.closeService) {
      const closeService = options.closeService;
      it('rejects permit calls after the service is closed with ClientClosedError', { timeout }, async () => {
        const permit = await semaphore(2).acquire();
        await permit.release();
        await closeService(subject);
        await expect(semaphore(2).tryAcquire()).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
        await expect(semaphore(2).available()).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
      });
    }
  });
}
