import {
  LockClient,
  LockLostError,
  LockReleasedError,
  type LockService,
  type LostReason,
  MemoryLockService,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it, vi } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 3_000;

describe('handle lifecycle', () => {
  it('Acquiring → Held: the validity window starts before the request and deducts drift', async () => {
    const { client, clock } = harness();
    clock.jump(1_000);
    const handle = await client.acquire('a', { ttlMs: TTL });
    expect(handle.state).toBe('held');
    expect(handle.isHeld()).toBe(true);
    expect(handle.ttlMs).toBe(TTL);
    expect(handle.expiresAt).toBe(1_000 + TTL - (TTL * 0.01 + 2));
    expect(handle.signal.aborted).toBe(false);
    expect(handle.fencingToken).toBe(1n);
  });

  it('Held → Held: renews around ttl/3 and keeps the lock far past its TTL', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(10 * TTL);
    expect(handle.state).toBe('held');
    expect(handle.isHeld()).toBe(true);
    const renewals = eventsOf('renewed');
    // One renewal per ~ttl/3 (±10% jitter, a fifth of an interval early at most): 30..38 in 10 TTLs.
    expect(renewals.length).toBeGreaterThanOrEqual(28);
    expect(renewals.length).toBeLessThanOrEqual(40);
    expect(faulty.counts.forwarded.renew).toBe(renewals.length);
    for (let i = 1; i < renewals.length; i++) {
      const gap = (renewals[i]?.at ?? 0) - (renewals[i - 1]?.at ?? 0);
      expect(gap).toBeGreaterThanOrEqual((TTL / 3) * 0.9 * 0.8 - 1);
      expect(gap).toBeLessThanOrEqual((TTL / 3) * 1.1 + 1);
    }
  });

  it('Held → Released: signal aborts with LockReleasedError, the service lock is gone', async () => {
    const { client, memory, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await handle.release();
    expect(handle.state).toBe('released');
    expect(handle.isHeld()).toBe(false);
    expect(handle.signal.aborted).toBe(true);
    expect(handle.signal.reason).toBeInstanceOf(LockReleasedError);
    expect(memory.holder('a')).toBeUndefined();
    expect(eventsOf('released')).toHaveLength(1);
    expect(client.heldCount).toBe(0);
  });

  it('Held → Lost (rejected): the service no longer knows the grant', async () => {
    const onLost = vi.fn();
    const { client, clock, memory } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    // Someone with the ownership token (here: the test, directly on the service) deletes the key behind our back.
    await memory.release(Object.assign({}, (handle as unknown as { lease: never }).lease));
    await clock.advance(TTL / 3 + TTL / 10);
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledTimes(1);
    expect(onLost).toHaveBeenCalledWith(handle, 'rejected' satisfies LostReason);
    expect(handle.signal.reason).toBeInstanceOf(LockLostError);
    expect((handle.signal.reason as LockLostError).reason).toBe('rejected');
  });

  it('Held → Lost (unreachable): a partition uses up renewFailBudget, then Lost before the lease could expire', async () => {
    const onLost = vi.fn();
    const { client, clock, faulty, eventsOf } = harness({ renewFailBudget: 2 });
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    faulty.partition('fail');
    await clock.advanceUntil(() => eventsOf('renew-failed').length === 1, TTL);
    expect(handle.state).toBe('held'); // one failure is within the budget
    await clock.advanceUntil(() => handle.state !== 'held', TTL);
    expect(handle.state).toBe('lost');
    expect(clock.monotonic()).toBeLessThan(handle.expiresAt);
    expect(eventsOf('renew-failed').map((e) => e.failures)).toEqual([1, 2]);
    expect(eventsOf('renew-failed')[0]?.error).toBeInstanceOf(TransportError);
    expect(onLost).toHaveBeenCalledWith(handle, 'unreachable');
    expect(eventsOf('lost')).toMatchObject([{ name: 'a', reason: 'unreachable' }]);
  });

  it('recovers from a transient renewal failure within the budget', async () => {
    const { client, clock, faulty, eventsOf } = harness({ renewFailBudget: 2 });
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.failNext(1);
    await clock.advance(3 * TTL);
    expect(handle.state).toBe('held');
    expect(eventsOf('renew-failed')).toHaveLength(1);
  });

  it('Held → Lost (expired): a hung service cannot keep a handle past its window', async () => {
    const { client, clock, faulty } = harness({ operationTimeoutMs: 60_000 });
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.partition('hang');
    await clock.advanceUntil(() => handle.state !== 'held', 2 * TTL);
    expect(handle.state).toBe('lost');
    expect((handle.signal.reason as LockLostError).reason).toBe('expired');
    // Declared at the deadline minus one round trip, not after the 60 s operation timeout.
    expect(clock.monotonic()).toBeLessThanOrEqual(handle.expiresAt);
    expect(clock.monotonic()).toBeGreaterThanOrEqual(handle.expiresAt - 2);
    faulty.heal();
  });

  it('slow holder: a pause past the TTL is Lost at the next tick, once, and the contender has a higher token', async () => {
    const onLost = vi.fn();
    const { client, clock, makeClient, faulty } = harness();
    const contender = makeClient();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    clock.jump(TTL + 1); // stop-the-world: no timer of anybody ran
    expect(handle.isHeld()).toBe(false); // answers at once, before the renewer ran
    const renewsBefore = faulty.counts.attempted.renew;
    const next = await contender.acquire('a', { ttlMs: TTL });
    expect(next.fencingToken).toBeGreaterThan(handle.fencingToken);
    await clock.advance(0);
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledTimes(1);
    expect(onLost.mock.calls[0]?.[1]).toBe('expired');
    // Detected locally, without a renewal round trip.
    expect(faulty.counts.attempted.renew).toBe(renewsBefore);
    await clock.advance(5 * TTL);
    expect(onLost).toHaveBeenCalledTimes(1);
    expect(next.state).toBe('held');
  });

  it('isHeld() after a pause moves the handle to Lost on the renewal path even without a timer firing', async () => {
    const onLost = vi.fn();
    const { client, clock } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    clock.jump(TTL);
    expect(handle.isHeld()).toBe(false);
    await Promise.resolve();
    await Promise.resolve();
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledTimes(1);
  });

  it('terminal states are sticky: no revival, no network calls, renew() false, release() says lost or resolves', async () => {
    const { client, clock, faulty } = harness();
    const lost = await client.acquire('lost', { ttlMs: TTL });
    const released = await client.acquire('released', { ttlMs: TTL });
    await released.release();
    clock.jump(TTL);
    await clock.advance(0);
    expect(lost.state).toBe('lost');
    const before = { ...faulty.counts.attempted };
    expect(await lost.renew()).toBe(false);
    expect(await released.renew()).toBe(false);
    // A lost handle's release tells the truth every time, with the same error, and sends nothing more.
    const firstRelease = lost.release();
    await expect(firstRelease).rejects.toBeInstanceOf(LockLostError);
    await released.release();
    await expect(lost.release()).rejects.toBe(await firstRelease.catch((error: unknown) => error));
    expect(faulty.counts.attempted).toEqual(before);
    await clock.advance(5 * TTL);
    expect(lost.state).toBe('lost');
    expect(released.state).toBe('released');
    expect(lost.isHeld()).toBe(false);
  });

  it('a renewal in flight when the handle is released cannot revive it', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.latency(200);
    await clock.advanceUntil(() => faulty.counts.attempted.renew === 1, TTL);
    expect(faulty.counts.forwarded.renew).toBe(0); // still travelling
    const releasing = handle.release(); // travels with the same latency, behind the renewal
    expect(handle.state).toBe('released');
    await clock.advance(300);
    await releasing;
    expect(faulty.counts.forwarded.renew).toBe(1);
    expect(handle.state).toBe('released');
    expect(eventsOf('renewed')).toHaveLength(0);
    await clock.advance(3 * TTL);
    expect(faulty.counts.attempted.renew).toBe(1); // nothing scheduled after release
  });

  it('double release touches the network once', async () => {
    const { client, faulty } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await Promise.all([handle.release(), handle.release()]);
    await handle.release();
    expect(faulty.counts.attempted.release).toBe(1);
  });

  it('release() rejects with TransportError when the service is unreachable, yet the handle is released', async () => {
    const { client, faulty } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.partition('fail');
    await expect(handle.release()).rejects.toBeInstanceOf(TransportError);
    expect(handle.state).toBe('released');
    await handle.release();
  });

  it('await using releases at the end of the scope and reports (not throws) a failed release', async () => {
    const { client, memory, faulty, eventsOf } = harness();
    {
      await using handle = await client.acquire('a', { ttlMs: TTL });
      expect(handle.isHeld()).toBe(true);
    }
    expect(memory.holder('a')).toBeUndefined();
    {
      await using handle = await client.acquire('b', { ttlMs: TTL });
      expect(handle.isHeld()).toBe(true);
      faulty.partition('fail');
    }
    expect(eventsOf('callback-error')).toMatchObject([{ name: 'b', source: 'release on dispose' }]);
  });

  it('a manual renew() extends the window; a refused one makes the handle Lost', async () => {
    const { client, clock, memory } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(100);
    const before = handle.expiresAt;
    expect(await handle.renew()).toBe(true);
    expect(handle.expiresAt).toBeGreaterThan(before);
    await memory.release((handle as unknown as { lease: never }).lease);
    expect(await handle.renew()).toBe(false);
    expect(handle.state).toBe('lost');
  });

  it('an exception in onLost is caught and reported, and the process goes on', async () => {
    const { client, clock, eventsOf } = harness();
    const handle = await client.acquire('a', {
      ttlMs: TTL,
      onLost: () => {
        throw new Error('boom');
      },
    });
    clock.jump(TTL);
    await clock.advance(0);
    expect(handle.state).toBe('lost');
    expect(eventsOf('callback-error')).toMatchObject([{ name: 'a', source: 'onLost callback' }]);
  });

  it('without any listener a failed renewal produces no unhandled rejection', async () => {
    const { clock, faulty } = harness();
    const { LockClient } = await import('@dlock/core');
    const bare = new LockClient(faulty, { clock });
    const handle = await bare.acquire('a', { ttlMs: TTL });
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(handle.state).toBe('lost');
    // vitest fails the run on any unhandled rejection or uncaught exception; reaching here with none is the check.
  });

  it('a wall-clock step changes nothing about validity', async () => {
    const { client, clock } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    const expiresAt = handle.expiresAt;
    clock.stepWall(-3_600_000);
    clock.stepWall(7_200_000);
    expect(handle.expiresAt).toBe(expiresAt);
    expect(handle.isHeld()).toBe(true);
    await clock.advance(3 * TTL);
    expect(handle.state).toBe('held');
  });

  it('events carry name, token and timings in order', async () => {
    const { client, clock, events } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(TTL / 2);
    await handle.release();
    expect(events.map((e) => e.type)).toEqual(['acquired', 'renewed', 'released']);
    expect(events[0]?.event).toMatchObject({
      name: 'a',
      fencingToken: 1n,
      ttlMs: TTL,
      attempts: 1,
      reentered: false,
    });
    expect(events[2]?.event).toMatchObject({ name: 'a', fencingToken: 1n, heldMs: TTL / 2 });
  });

  it('an outcome helper never leaks a rejection (self-check of the harness)', async () => {
    const state = outcome(Promise.reject(new Error('x')));
    await Promise.resolve();
    await Promise.resolve();
    expect(state.done).toBe(true);
    expect(state.error).toBeInstanceOf(Error);
  });
});

describe('service-reported loss', () => {
  it('a service that reports lost grants (an expired session) makes exactly those handles Lost at once', async () => {
    const { LockClient, MemoryLockService } = await import('@dlock/core');
    const { FakeClock } = await import('@dlock/testing');
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let report: ((tokens: readonly string[]) => void) | undefined;
    let unsubscribed = false;
    const sessionful = {
      acquire: memory.acquire.bind(memory),
      renew: memory.renew.bind(memory),
      release: memory.release.bind(memory),
      watch: memory.watch.bind(memory),
      watchLeases(onLost: (tokens: readonly string[]) => void) {
        report = onLost;
        return () => {
          unsubscribed = true;
        };
      },
    };
    const client = new LockClient(sessionful, { clock });
    const lost: string[] = [];
    const a = await client.acquire('a', {
      ttlMs: TTL,
      onLost: (h, reason) => lost.push(`${h.name}:${reason}`),
    });
    const b = await client.acquire('b', {
      ttlMs: TTL,
      onLost: (h, reason) => lost.push(`${h.name}:${reason}`),
    });
    const ownershipOf = (h: unknown) => (h as { lease: { ownershipToken: string } }).lease.ownershipToken;
    report?.([ownershipOf(a), 'some-other-grant']);
    expect(a.state).toBe('lost');
    expect(b.state).toBe('held');
    expect(lost).toEqual(['a:rejected']);
    report?.([ownershipOf(a)]); // a repeated notice changes nothing
    expect(lost).toEqual(['a:rejected']);
    await client.close();
    expect(unsubscribed).toBe(true);
  });
});

describe('a renewal batch mixing a handle about to close with healthy ones', () => {
  it('waits for the healthy answers past the closing window, and still loses the closing handle at its end', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let slowMs = 0;
    const service: LockService = {
      acquire: (r) => memory.acquire(r),
      renew: (r) => memory.renew(r),
      // Answers after `slowMs`, as a service answering per shard does when one shard is slow.
      renewMany: async (requests) => {
        await clock.sleep(slowMs);
        return memory.renewMany(requests);
      },
      release: (l) => memory.release(l),
      watch: (n, cb) => memory.watch(n, cb),
    };
    const client = new LockClient(service, { clock, operationTimeoutMs: 400 });
    const failed: string[] = [];
    const lost: { name: string; at: number }[] = [];
    client.events.on('renew-failed', (e) => failed.push(e.name));
    client.events.on('lost', (e) => lost.push({ name: e.name, at: e.at }));
    const closing = await client.acquire('closing', { ttlMs: 300 });
    await clock.advance(150);
    const healthy = await client.acquire('healthy', { ttlMs: 900 });
    // From now on a batch takes 250 ms to answer: longer than what is left of `closing`'s window, shorter than
    // `healthy`'s and the operation bound. Both come due together once `closing` has used most of its window.
    slowMs = 250;
    await clock.advance(1_000);
    expect(closing.state).toBe('lost');
    expect(lost.find((l) => l.name === 'closing')?.at).toBeLessThanOrEqual(closing.expiresAt + 1);
    expect(healthy.state).toBe('held');
    expect(failed).not.toContain('healthy');
    await client.close();
  });
});
