import { randomBytes } from 'node:crypto';
import { LockClient, type LockInfo, type LockService, PermitsMismatchError } from '@dlock/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ContractSubject } from './lock-service-contract.js';

/** Tunes {@link inspectContract} to what a service reports. */
export interface InspectContractOptions {
  /** The leases' TTL in ms. Default 2,000 (etcd's leases are whole seconds, at least 2). */
  readonly ttlMs?: number;
  /**
   * The service queues lock waiters itself and counts them in `inspect(name).waiters`. Default false: the suite then
   * checks that `waiters` is absent, as it must be for a service that cannot know.
   */
  readonly lockWaiters?: boolean;
  /** The service counts a semaphore's queued waiters in `inspectPermits(...).waiters`. Default true. */
  readonly permitWaiters?: boolean;
  /**
   * The service reports a holder's time left (`expiresInMs`). Default true; false for a service whose leases are
   * sessions other clients cannot see into (ZooKeeper): the suite then checks that it is absent.
   */
  readonly expiresInMs?: boolean;
  /**
   * A lock acquired with metadata still reports its owner id. Default true; false for a service that stores such a
   * grant's metadata alone (etcd, as Go's `Election` does): the suite then checks that the owner id is absent there.
   */
  readonly ownerIdWithMetadata?: boolean;
  /** Per-test timeout for vitest, ms. Default 30_000. */
  readonly testTimeoutMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads until `done` holds or `withinMs` passes; the last read either way. */
async function readUntil<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  withinMs = 5_000,
): Promise<T> {
  const until = Date.now() + withinMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() >= until) return value;
    await sleep(20);
  }
}

/**
 * What `LockClient.inspect` and `Semaphore.inspect` must report on a service (`LockService.inspect`,
 * `inspectPermits`), as a vitest suite against the real server: the holder's owner id, fencing token, time left and
 * metadata, read by another client, and the waiters where the service counts them. Parts the service does not offer
 * (no `inspect`, no `inspectPermits`) are skipped. Each test makes its own clients, as separate processes would be.
 */
export function inspectContract(
  label: string,
  makeSubject: () => Promise<ContractSubject> | ContractSubject,
  options: InspectContractOptions = {},
): void {
  const ttlMs = options.ttlMs ?? 2_000;
  const timeout = options.testTimeoutMs ?? 30_000;
  const lockWaiters = options.lockWaiters ?? false;
  const permitWaiters = options.permitWaiters ?? true;
  const knowsExpiry = options.expiresInMs ?? true;
  const ownerWithMetadata = options.ownerIdWithMetadata ?? true;

  describe(`Inspect contract: ${label}`, () => {
    let subject: ContractSubject;
    let service: LockService;
    let name: string;
    const clients: LockClient[] = [];
    const client = (): LockClient => {
      const made = new LockClient(service, { operationTimeoutMs: 5_000 });
      clients.push(made);
      return made;
    };
    const locks = (): boolean => typeof service.inspect === 'function';
    const permits = (): boolean => typeof service.inspectPermits === 'function';
    /** A lease's time left: more than nothing, at most its TTL (a service may round a TTL up to a whole second). */
    const expectTimeLeft = (ms: number | undefined): void => {
      if (!knowsExpiry) {
        expect(ms).toBeUndefined();
        return;
      }
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThanOrEqual(Math.ceil(ttlMs / 1_000) * 1_000);
    };

    beforeEach(async () => {
      subject = await makeSubject();
      service = subject.service;
      name = `inspect-${randomBytes(6).toString('hex')}`;
    });

    afterEach(async () => {
      await Promise.all(clients.splice(0).map((c) => c.close()));
      await subject.close?.();
    });

    it('a free lock reads as not held, with no holder fields', { timeout }, async (context) => {
      if (!locks()) return context.skip();
      const info = await client().inspect(name);
      expect(info.held).toBe(false);
      expect(info.ownerId).toBeUndefined();
      expect(info.fencingToken).toBeUndefined();
      expect(info.metadata).toBeUndefined();
      if (lockWaiters) expect(info.waiters ?? 0).toBe(0);
      else expect(info.waiters).toBeUndefined();
    });

    it('a held lock names its owner id, fencing token, time left and metadata to another client', {
      timeout,
    }, async (context) => {
      if (!locks()) return context.skip();
      const holder = client();
      const handle = await holder.acquire(name, { ttlMs, metadata: 'host-a:4100:invoice-run ✓' });
      const info = await client().inspect(name);
      expect(info).toMatchObject({
        held: true,
        fencingToken: handle.fencingToken,
        metadata: 'host-a:4100:invoice-run ✓',
      });
      expect(info.ownerId).toBe(ownerWithMetadata ? holder.ownerId : undefined);
      expectTimeLeft(info.expiresInMs);
      const bare = await holder.acquire(`${name}:bare`, { ttlMs });
      const bareInfo = await client().inspect(`${name}:bare`);
      expect(bareInfo).toMatchObject({
        held: true,
        ownerId: holder.ownerId,
        fencingToken: bare.fencingToken,
      });
      expect(bareInfo.metadata).toBeUndefined();
      await Promise.all([handle.release(), bare.release()]);
      expect((await client().inspect(name)).held).toBe(false);
    });

    it(lockWaiters ? 'counts the callers queued for a lock' : 'does not claim to count lock waiters', {
      timeout,
    }, async (context) => {
      if (!locks()) return context.skip();
      const handle = await client().acquire(name, { ttlMs });
      const gaveUp = new AbortController();
      const waiting = client()
        .acquire(name, { ttlMs, waitMs: 20_000, signal: gaveUp.signal })
        .catch(() => null);
      const observer = client();
      const read = (): Promise<LockInfo> => observer.inspect(name);
      if (lockWaiters) {
        expect((await readUntil(read, (i) => i.waiters === 1)).waiters).toBe(1);
      } else {
        await sleep(100);
        expect((await read()).waiters).toBeUndefined();
      }
      gaveUp.abort();
      expect(await waiting).toBeNull();
      if (lockWaiters) expect((await readUntil(read, (i) => i.waiters === 0)).waiters).toBe(0);
      await handle.release();
    });

    it("a lock handed to a queued waiter reports that waiter's owner id and metadata", {
      timeout,
    }, async (context) => {
      if (!locks()) return context.skip();
      const handle = await client().acquire(name, { ttlMs, metadata: 'first' });
      const waiter = client();
      const waiting = waiter.acquire(name, { ttlMs, waitMs: 20_000, metadata: 'second ✓' });
      await sleep(100);
      await handle.release();
      const next = await waiting;
      const info = await client().inspect(name);
      expect(info).toMatchObject({ held: true, fencingToken: next.fencingToken, metadata: 'second ✓' });
      expect(info.ownerId).toBe(ownerWithMetadata ? waiter.ownerId : undefined);
      await next.release();
    });

    it('an unused semaphore has no holders', { timeout }, async (context) => {
      if (!permits()) return context.skip();
      const info = await client().semaphore(name, { permits: 3, ttlMs }).inspect();
      expect(info.permits).toBe(3);
      expect(info.held).toEqual([]);
      if (permitWaiters) expect(info.waiters).toBe(0);
    });

    it('lists the open permits by slot with owner id, fencing token, time left and metadata', {
      timeout,
    }, async (context) => {
      if (!permits()) return context.skip();
      const [a, b] = [client(), client()];
      const pa = await a.semaphore(name, { permits: 3, ttlMs }).acquire({ metadata: 'gpu-worker-a ✓' });
      const pb = await b.semaphore(name, { permits: 3, ttlMs }).acquire();
      const info = await client().semaphore(name, { permits: 3, ttlMs }).inspect();
      expect(info.permits).toBe(3);
      expect(info.held.map((h) => h.slot)).toEqual([pa.slot, pb.slot].sort((x, y) => x - y));
      const heldA = info.held.find((h) => h.slot === pa.slot);
      const heldB = info.held.find((h) => h.slot === pb.slot);
      expect(heldA).toMatchObject({
        ownerId: a.ownerId,
        fencingToken: pa.fencingToken,
        metadata: 'gpu-worker-a ✓',
      });
      expect(heldB).toMatchObject({ ownerId: b.ownerId, fencingToken: pb.fencingToken });
      expect(heldB?.metadata).toBeUndefined();
      expectTimeLeft(heldA?.expiresInMs);
      expectTimeLeft(heldB?.expiresInMs);
      await pa.release();
      const after = await client().semaphore(name, { permits: 3, ttlMs }).inspect();
      expect(after.held.map((h) => h.ownerId)).toEqual([b.ownerId]);
      await pb.release();
    });

    it(permitWaiters ? 'counts the callers queued for a permit' : 'may leave permit waiters uncounted', {
      timeout,
    }, async (context) => {
      if (!permits()) return context.skip();
      const held = await client().semaphore(name, { permits: 1, ttlMs }).acquire();
      const gaveUp = new AbortController();
      const waiting = client()
        .semaphore(name, { permits: 1, ttlMs })
        .acquire({ waitMs: 20_000, signal: gaveUp.signal })
        .catch(() => null);
      const pool = client().semaphore(name, { permits: 1, ttlMs });
      if (permitWaiters) {
        expect(
          (
            await readUntil(
              () => pool.inspect(),
              (i) => i.waiters === 1,
            )
          ).waiters,
        ).toBe(1);
      }
      gaveUp.abort();
      expect(await waiting).toBeNull();
      if (permitWaiters) {
        expect(
          (
            await readUntil(
              () => pool.inspect(),
              (i) => i.waiters === 0,
            )
          ).waiters,
        ).toBe(0);
      }
      await held.release();
    });

    it("a permit handed to a queued waiter reports that waiter's owner id and metadata", {
      timeout,
    }, async (context) => {
      if (!permits()) return context.skip();
      const held = await client().semaphore(name, { permits: 1, ttlMs }).acquire({ metadata: 'first' });
      const waiter = client();
      const waiting = waiter
        .semaphore(name, { permits: 1, ttlMs })
        .acquire({ waitMs: 20_000, metadata: 'second ✓' });
      await sleep(100);
      await held.release();
      const next = await waiting;
      const info = await client().semaphore(name, { permits: 1, ttlMs }).inspect();
      expect(info.held).toHaveLength(1);
      expect(info.held[0]).toMatchObject({
        slot: next.slot,
        ownerId: waiter.ownerId,
        fencingToken: next.fencingToken,
        metadata: 'second ✓',
      });
      await next.release();
    });

    it('refuses another limit while the semaphore is in use, like available()', {
      timeout,
    }, async (context) => {
      if (!permits()) return context.skip();
      const held = await client().semaphore(name, { permits: 2, ttlMs }).acquire();
      await expect(client().semaphore(name, { permits: 3, ttlMs }).inspect()).rejects.toBeInstanceOf(
        PermitsMismatchError,
      );
      await held.release();
    });
  });
}
