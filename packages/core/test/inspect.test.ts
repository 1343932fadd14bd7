import {
  ClientClosedError,
  InvalidArgumentError,
  LockClient,
  LockLostError,
  type LockService,
  MemoryLockService,
  PermitsMismatchError,
  TransportError,
  UnsupportedError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 3_000;

/** A service with only the four required methods and permits: no `inspect`, no `inspectPermits`. */
function withoutInspect(memory: MemoryLockService): LockService {
  return {
    acquire: (r) => memory.acquire(r),
    renew: (r) => memory.renew(r),
    release: (l) => memory.release(l),
    watch: (n, f) => memory.watch(n, f),
    acquirePermit: (r) => memory.acquirePermit(r),
    availablePermits: (n, p) => memory.availablePermits(n, p),
  };
}

describe('client.inspect', () => {
  it('reads the holder from the service: owner id, fencing token, time left, metadata', async () => {
    const { client, makeClient, clock } = harness();
    expect(await client.inspect('billing:42')).toEqual({ held: false });
    const handle = await client.acquire('billing:42', { ttlMs: TTL, metadata: 'web-1:4100:invoice-run' });
    await clock.advance(500);
    // Read from another client: the answer comes from the service, not from the holder's own handles.
    expect(await makeClient().inspect('billing:42')).toEqual({
      held: true,
      ownerId: client.ownerId,
      fencingToken: handle.fencingToken,
      expiresInMs: TTL - 500,
      metadata: 'web-1:4100:invoice-run',
    });
    await handle.release();
    expect(await client.inspect('billing:42')).toEqual({ held: false });
  });

  it('a lock acquired without metadata has none; one that ran out is not held', async () => {
    const { client, makeClient, clock } = harness();
    const handle = await client.acquire('job', { ttlMs: TTL, renew: false });
    const info = await makeClient().inspect('job');
    expect(info).toEqual({
      held: true,
      ownerId: client.ownerId,
      fencingToken: handle.fencingToken,
      expiresInMs: TTL,
    });
    await clock.advance(TTL);
    expect(await makeClient().inspect('job')).toEqual({ held: false });
  });

  it('validates the name, says when the service cannot inspect, and rejects after close', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const plain = new LockClient(withoutInspect(memory), { clock });
    await expect(plain.inspect('a')).rejects.toBeInstanceOf(UnsupportedError);
    const client = new LockClient(memory, { clock });
    await expect(client.inspect('')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(client.inspect(42 as unknown as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await client.close();
    await expect(client.inspect('a')).rejects.toBeInstanceOf(ClientClosedError);
    await plain.close();
  });

  it('is bounded by operationTimeoutMs when the service hangs', async () => {
    const { client, faulty, clock } = harness({ operationTimeoutMs: 400 });
    faulty.partition('hang');
    const inspected = outcome(client.inspect('stuck'));
    await clock.advance(399);
    expect(inspected.done).toBe(false);
    await clock.advance(1);
    expect(inspected.error).toBeInstanceOf(TransportError);
    faulty.heal();
  });

  it('a malformed answer is a TransportError; fields the SPI does not define are dropped', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let answer: unknown = { held: 'yes' };
    const service: LockService = { ...withoutInspect(memory), inspect: async () => answer as never };
    const client = new LockClient(service, { clock });
    await expect(client.inspect('a')).rejects.toBeInstanceOf(TransportError);
    answer = { held: true, fencingToken: 7, ownerId: 'o' };
    await expect(client.inspect('a')).rejects.toBeInstanceOf(TransportError);
    answer = { held: true, fencingToken: 7n, ownerId: 'o', expiresInMs: -3, secret: 'x' };
    expect(await client.inspect('a')).toEqual({ held: true, fencingToken: 7n, ownerId: 'o', expiresInMs: 0 });
    await client.close();
  });
});

describe('a service that fails with a value String() cannot convert', () => {
  // `Object.create(null)` has no toString. Its TransportError's message used to throw in the promise reaction that
  // settles the call: the call never settled and the process had an unhandled rejection.
  const unprintable = (): Promise<never> => Promise.reject(Object.create(null));

  it('inspect and inspectPermits still settle, with a TransportError', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const service: LockService = {
      ...withoutInspect(memory),
      inspect: unprintable,
      inspectPermits: unprintable,
    };
    const client = new LockClient(service, { clock, operationTimeoutMs: 1_000 });
    const inspected = outcome(client.inspect('a'));
    const permits = outcome(client.semaphore('pool', { permits: 2, ttlMs: TTL }).inspect());
    await clock.advance(0);
    expect(inspected.error).toBeInstanceOf(TransportError);
    expect((inspected.error as Error).message).toBe(
      'inspect "a" failed: a value String() cannot convert (object)',
    );
    expect(permits.error).toBeInstanceOf(TransportError);
    await client.close();
  });

  it('a renewal that fails so is a failed renewal: the handle is lost as unreachable when its window closes', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const service: LockService = { ...withoutInspect(memory), renew: unprintable };
    const client = new LockClient(service, { clock, operationTimeoutMs: 1_000 });
    const failures: unknown[] = [];
    client.events.on('renew-failed', (event) => failures.push(event.error));
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(2 * TTL);
    expect(failures.length).toBeGreaterThan(0);
    expect(failures[0]).toBeInstanceOf(TransportError);
    expect(handle.isHeld()).toBe(false);
    expect(handle.signal.reason).toBeInstanceOf(LockLostError);
    expect((handle.signal.reason as LockLostError).reason).toBe('unreachable');
    await client.close();
  });
});

describe('semaphore.inspect', () => {
  it('lists the open permits by slot with owner, token, time left and metadata, and counts the waiters', async () => {
    const { client, makeClient, clock } = harness();
    const pool = (c: LockClient) => c.semaphore('gpu', { permits: 2, ttlMs: TTL });
    expect(await pool(client).inspect()).toEqual({ permits: 2, held: [], waiters: 0 });
    const a = await pool(client).acquire({ metadata: 'trainer-a' });
    const other = makeClient();
    const b = await pool(other).acquire();
    const third = makeClient();
    const waiting = outcome(pool(third).acquire({ waitMs: 10_000 }));
    await clock.advance(500);
    const info = await pool(makeClient()).inspect();
    expect(info).toEqual({
      permits: 2,
      held: [
        {
          slot: a.slot,
          ownerId: client.ownerId,
          fencingToken: a.fencingToken,
          expiresInMs: TTL - 500,
          metadata: 'trainer-a',
        },
        { slot: b.slot, ownerId: other.ownerId, fencingToken: b.fencingToken, expiresInMs: TTL - 500 },
      ].sort((x, y) => x.slot - y.slot),
      waiters: 1,
    });
    await a.release();
    await clock.advance(0);
    const next = await pool(client).inspect();
    expect(next.waiters).toBe(0);
    expect(next.held.map((h) => h.ownerId).sort()).toEqual([other.ownerId, third.ownerId].sort());
    expect(waiting.done).toBe(true);
    await Promise.all([b.release(), (waiting.value as { release(): Promise<void> }).release()]);
    expect(await pool(client).inspect()).toEqual({ permits: 2, held: [], waiters: 0 });
  });

  it('refuses another limit while the semaphore is in use, like available()', async () => {
    const { client, makeClient } = harness();
    const held = await client.semaphore('api', { permits: 3, ttlMs: TTL }).acquire();
    await expect(makeClient().semaphore('api', { permits: 2, ttlMs: TTL }).inspect()).rejects.toBeInstanceOf(
      PermitsMismatchError,
    );
    await held.release();
    expect((await makeClient().semaphore('api', { permits: 2, ttlMs: TTL }).inspect()).held).toEqual([]);
  });

  it('a service without inspectPermits: inspect and permit metadata are UnsupportedError', async () => {
    const clock = new FakeClock();
    const client = new LockClient(withoutInspect(new MemoryLockService({ clock })), { clock });
    const pool = client.semaphore('s', { permits: 1, ttlMs: TTL });
    await expect(pool.inspect()).rejects.toBeInstanceOf(UnsupportedError);
    await expect(pool.acquire({ metadata: 'x' })).rejects.toBeInstanceOf(UnsupportedError);
    await expect(pool.tryAcquire({ metadata: 'x' })).rejects.toBeInstanceOf(UnsupportedError);
    const permit = await pool.acquire();
    await permit.release();
    await client.close();
    await expect(pool.inspect()).rejects.toBeInstanceOf(ClientClosedError);
  });

  it('a malformed answer is a TransportError', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let answer: unknown = { permits: 2, held: [{ slot: 2, ownerId: 'o', fencingToken: 1n, expiresInMs: 5 }] };
    const service: LockService = { ...withoutInspect(memory), inspectPermits: async () => answer as never };
    const pool = new LockClient(service, { clock }).semaphore('s', { permits: 2, ttlMs: TTL });
    await expect(pool.inspect()).rejects.toBeInstanceOf(TransportError);
    const holder = { slot: 1, ownerId: 'o', fencingToken: 1n, expiresInMs: 5 };
    answer = { permits: 2, held: [holder, holder] };
    await expect(pool.inspect()).rejects.toBeInstanceOf(TransportError);
    answer = { permits: 3, held: [] };
    await expect(pool.inspect()).rejects.toBeInstanceOf(TransportError);
    answer = { permits: 2, held: [holder, { ...holder, slot: 0, metadata: 'm' }] };
    expect(await pool.inspect()).toEqual({
      permits: 2,
      held: [{ ...holder, slot: 0, metadata: 'm' }, holder],
    });
  });
});

describe('semaphore.available', () => {
  it('an answer that is not a count from 0 to permits is a TransportError, never handed on', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let answer: unknown = 0;
    const service: LockService = { ...withoutInspect(memory), availablePermits: async () => answer as never };
    const pool = new LockClient(service, { clock }).semaphore('s', { permits: 2, ttlMs: TTL });
    const got: unknown[] = [];
    for (const bad of [3, -1, 1.5, Number.NaN, '1', null, undefined, 1n]) {
      answer = bad;
      got.push(await pool.available().catch((error: unknown) => error instanceof TransportError));
    }
    expect(got).toEqual([true, true, true, true, true, true, true, true]);
    for (const good of [0, 1, 2]) {
      answer = good;
      expect(await pool.available()).toBe(good);
    }
  });
});
