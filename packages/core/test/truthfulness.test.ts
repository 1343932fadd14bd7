import {
  type AcquireRequest,
  type AcquireResult,
  AcquireTimeoutError,
  ClientClosedError,
  InvalidArgumentError,
  LockClient,
  LockLostError,
  type LockService,
  MemoryLockService,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it, vi } from 'vitest';
import { harness, outcome } from './harness.js';

// Regression tests for answers the client used to give that were not so. Each fails on the code before the fix.
const TTL = 1_000;

describe('a release after the validity window closed', () => {
  it('is a loss: lost (expired), onLost once, the owner-checked delete still sent, and release() says so', async () => {
    const { client, makeClient, clock, memory, faulty, eventsOf } = harness();
    const onLost = vi.fn();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    // A stop-the-world pause past the lease: no timer runs, a successor takes the lock meanwhile.
    clock.jump(TTL + 50);
    const successor = await makeClient().acquire('a', { ttlMs: TTL });
    const releasesBefore = faulty.counts.attempted.release;

    const released = outcome(handle.release());
    await clock.advance(0);
    expect(released.error).toBeInstanceOf(LockLostError);
    expect((released.error as LockLostError).reason).toBe('expired');
    expect(handle.state).toBe('lost');
    expect(handle.signal.reason).toBe(released.error);
    expect(onLost).toHaveBeenCalledTimes(1);
    expect(onLost).toHaveBeenCalledWith(handle, 'expired');
    expect(eventsOf('lost')).toMatchObject([{ name: 'a', reason: 'expired' }]);
    expect(eventsOf('released')).toHaveLength(0);
    // The delete went out, and being owner-checked it left the successor alone.
    expect(faulty.counts.attempted.release).toBe(releasesBefore + 1);
    expect(memory.holder('a')).toBe(successor.fencingToken);

    // Asking again gives the same answer and sends nothing; onLost does not run twice.
    await expect(handle.release()).rejects.toBe(released.error);
    expect(faulty.counts.attempted.release).toBe(releasesBefore + 1);
    expect(onLost).toHaveBeenCalledTimes(1);
  });

  it('a nested reentrant release after the window closed is a loss too', async () => {
    const { client, clock } = harness();
    const outer = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    await client.acquire('a', { ttlMs: TTL, reentrant: true });
    clock.jump(TTL);
    await expect(outer.release()).rejects.toBeInstanceOf(LockLostError);
    expect(outer.state).toBe('lost');
  });

  it('`await using` throws the loss at scope exit instead of ending cleanly', async () => {
    const { client, clock } = harness();
    const scope = async (): Promise<void> => {
      await using lock = await client.acquire('a', { ttlMs: TTL });
      expect(lock.isHeld()).toBe(true);
      clock.jump(TTL);
    };
    await expect(scope()).rejects.toBeInstanceOf(LockLostError);
  });

  it('a release inside the window still releases and resolves', async () => {
    const { client, clock, memory } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    clock.jump(TTL / 2);
    await handle.release();
    expect(handle.state).toBe('released');
    expect(memory.holder('a')).toBeUndefined();
  });
});

describe('loss is judged against the validity window', () => {
  it('a transport outage of 0.3 × TTL across the first renewal and its retry costs nothing: the lock stays held', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    // Connections refused (failing fast, as during a reconnect) for 0.3 × TTL from just before the first renewal,
    // which is due at ttl/3 ± 10%, so that renewal and its first retry fail.
    await clock.advance(0.29 * TTL);
    expect(faulty.counts.attempted.renew).toBe(0);
    faulty.partition('fail');
    const renewedBefore = eventsOf('renewed').length;
    await clock.advance(0.3 * TTL);
    expect(eventsOf('renew-failed').length).toBeGreaterThanOrEqual(2);
    faulty.heal();
    await clock.advance(5 * TTL);
    expect(handle.state).toBe('held');
    expect(eventsOf('renew-failed').length).toBeGreaterThanOrEqual(1);
    expect(eventsOf('renewed').length).toBeGreaterThan(renewedBefore + 5);
    expect(eventsOf('lost')).toHaveLength(0);
  });

  it('an outage longer than the window makes the handle lost (unreachable) when the window closes, not before', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.partition('fail');
    await clock.advanceUntil(() => handle.state !== 'held', 2 * TTL, 1);
    expect(handle.state).toBe('lost');
    expect((handle.signal.reason as LockLostError).reason).toBe('unreachable');
    const lostAt = eventsOf('lost')[0]?.at ?? 0;
    expect(lostAt).toBeGreaterThanOrEqual(handle.expiresAt);
    expect(lostAt).toBeLessThanOrEqual(handle.expiresAt + 1);
    // Retried inside the window rather than given up after two failures.
    expect(eventsOf('renew-failed').length).toBeGreaterThanOrEqual(3);
  });

  it('keeps its locks with a round trip of 0.36 × TTL (renewals in flight are waited for)', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    // Latency on every call from now on: each renewal takes 0.36 × TTL to be answered.
    faulty.latency(0.36 * TTL);
    await clock.advance(10 * TTL);
    expect(handle.state).toBe('held');
    expect(eventsOf('renewed').length).toBeGreaterThanOrEqual(20);
    expect(eventsOf('lost')).toHaveLength(0);
  });

  it('an explicit renewFailBudget still gives up after that many failures in a row', async () => {
    const { client, clock, faulty, eventsOf } = harness({ renewFailBudget: 1 });
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.partition('fail');
    await clock.advanceUntil(() => handle.state !== 'held', TTL, 1);
    expect(eventsOf('renew-failed')).toHaveLength(1);
    expect(clock.monotonic()).toBeLessThan(handle.expiresAt);
    expect((handle.signal.reason as LockLostError).reason).toBe('unreachable');
  });

  it('a renewal answered only after the window closed does not revive the handle', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.latency(TTL);
    await clock.advance(2 * TTL);
    expect(handle.state).toBe('lost');
    expect((handle.signal.reason as LockLostError).reason).toBe('expired');
    expect(eventsOf('renewed')).toHaveLength(0);
  });
});

describe('why an acquire gave up', () => {
  it('says the lock is held by this same client and suggests reentrant: true', async () => {
    const { client, clock } = harness();
    await client.acquire('a', { ttlMs: 10 * TTL });
    const second = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 500 }));
    await clock.advance(600);
    expect(second.error).toBeInstanceOf(AcquireTimeoutError);
    const error = second.error as AcquireTimeoutError;
    expect(error.reason).toBe('held-by-this-client');
    expect(error.message).toContain('this same client');
    expect(error.message).toContain('reentrant: true');
  });

  it('says another owner holds it when another client does', async () => {
    const { client, makeClient } = harness();
    await makeClient().acquire('a', { ttlMs: TTL });
    const error = await client.acquire('a', { ttlMs: TTL }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AcquireTimeoutError);
    expect((error as AcquireTimeoutError).reason).toBe('held-by-another-owner');
    expect((error as AcquireTimeoutError).message).toContain('held by another owner');
  });

  it('says the budget was spent in transit when every grant arrived too late to be used, not "held"', async () => {
    const { client, clock, faulty, memory } = harness();
    faulty.latency(TTL);
    const attempt = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 1_500 }));
    await clock.advance(5 * TTL);
    const error = attempt.error as AcquireTimeoutError;
    expect(error).toBeInstanceOf(AcquireTimeoutError);
    expect(error.reason).toBe('spent-in-transit');
    expect(error.message).not.toContain('another owner');
    // The grants it could not use were given back.
    expect(memory.holder('a')).toBeUndefined();
  });

  it('admits a free lock granted after two round trips when the service reports the last one (roundTripMs)', async () => {
    // An etcd-like service: a lease grant (the TTL starts when it is sent), then the write that wins, each a
    // 600 ms round trip. The whole call took 1,200 ms of a 2,000 ms TTL, but a renewal needs only 600 ms.
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const twoTrips = (roundTripMs: number | undefined): LockService => ({
      async acquire(request: AcquireRequest): Promise<AcquireResult> {
        await clock.sleep(1_200);
        const result = await memory.acquire(request);
        if (!result.acquired || roundTripMs === undefined) return result;
        return { acquired: true, grant: { ...result.grant, roundTripMs } };
      },
      renew: (request) => memory.renew(request),
      release: (lease) => memory.release(lease),
      watch: (name, cb) => memory.watch(name, cb),
    });
    const reported = new LockClient(twoTrips(600), { clock });
    const got = outcome(reported.acquire('a', { ttlMs: 2_000 }));
    await clock.advance(1_300);
    expect(got.error).toBeUndefined();
    expect((got.value as { state: string }).state).toBe('held');

    // Without the report core must assume the whole call was one round trip, and it gives the grant back.
    const unreported = new LockClient(twoTrips(undefined), { clock });
    const refused = outcome(unreported.acquire('b', { ttlMs: 2_000 }));
    await clock.advance(1_300);
    expect((refused.error as AcquireTimeoutError).reason).toBe('spent-in-transit');
  });
});

describe('withLock tells how the hold ended', () => {
  it('rejects with LockLostError when the lock was lost while the function ran, after the function settles', async () => {
    const { client, clock, faulty } = harness();
    let finished = false;
    const run = outcome(
      client.withLock('a', { ttlMs: TTL }, async () => {
        // Ignores the signal: keeps working through a partition that costs the lock.
        faulty.partition('fail');
        await clock.sleep(3 * TTL);
        finished = true;
        return 'result computed without the lock';
      }),
    );
    await clock.advance(4 * TTL);
    expect(finished).toBe(true);
    expect(run.done).toBe(true);
    expect(run.value).toBeUndefined();
    expect(run.error).toBeInstanceOf(LockLostError);
    expect((run.error as LockLostError).code).toBe('LOCK_LOST');
  });

  it('rejects with ClientClosedError when close() ends the hold while the function runs', async () => {
    const { client, clock } = harness();
    const run = outcome(
      client.withLock('a', { ttlMs: TTL }, async (lock) => {
        void client.close();
        await clock.sleep(10);
        expect(lock.signal.aborted).toBe(true);
        return 'done';
      }),
    );
    await clock.advance(50);
    expect(run.error).toBeInstanceOf(ClientClosedError);
  });

  it('rejects with ClientClosedError also when the function rethrows the signal reason after close()', async () => {
    const { client, clock } = harness();
    const run = outcome(
      client.withLock('a', { ttlMs: TTL }, async (lock) => {
        void client.close();
        await clock.sleep(10);
        lock.signal.throwIfAborted();
        return 'unreachable';
      }),
    );
    await clock.advance(50);
    expect(run.error).toBeInstanceOf(ClientClosedError);
  });
});

describe('misspelt options', () => {
  it('refuses an unknown acquire option and names the intended one, before any call', async () => {
    const { client, faulty } = harness();
    const error = await client
      .acquire('a', { ttlMs: TTL, waitMS: 5_000 } as unknown as { ttlMs: number })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('options.waitMS');
    expect((error as Error).message).toContain('did you mean "waitMs"');
    expect(faulty.counts.attempted.acquire).toBe(0);
  });

  it('refuses unknown client options, nested retry options included', () => {
    const service = new MemoryLockService();
    const make = (options: object) => () => new LockClient(service, options);
    expect(make({ operationTimeoutMS: 100 })).toThrow(
      /options\.operationTimeoutMS .*did you mean "operationTimeoutMs"/,
    );
    expect(make({ retry: { base: 10 } })).toThrow(/options\.retry\.base .*did you mean "baseMs"/);
    expect(make({ colour: 'red' })).toThrow(InvalidArgumentError);
    expect(make({ colour: 'red' })).toThrow(/options\.colour is not an option; known options/);
  });
});

describe('renew: false (a lease granted once for its TTL)', () => {
  it('is never renewed, ends lost (expired) at its window, and close() leaves it to run out', async () => {
    const { client, clock, faulty, memory, eventsOf } = harness();
    const handle = await client.acquire('cron:report', { ttlMs: TTL, renew: false });
    await clock.advance(TTL / 2);
    await client.close();
    // Still held on the service: closing must not let the job run twice in one period.
    expect(memory.holder('cron:report')).toBe(handle.fencingToken);
    expect(faulty.counts.attempted.release).toBe(0);
    expect(faulty.counts.attempted.renew).toBe(0);
    await clock.advance(TTL);
    expect(memory.holder('cron:report')).toBeUndefined();
    expect(eventsOf('renewed')).toHaveLength(0);
  });

  it('fires onLost with expired when the period ends while the client is open', async () => {
    const { client, clock, faulty } = harness();
    const onLost = vi.fn();
    const handle = await client.acquire('cron:report', { ttlMs: TTL, renew: false, onLost });
    await clock.advance(2 * TTL);
    expect(faulty.counts.attempted.renew).toBe(0);
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledWith(handle, 'expired');
  });

  it('runs a job at most once per period across contenders (the cron recipe)', async () => {
    const { makeClient, clock } = harness();
    const instances = [makeClient(), makeClient(), makeClient()];
    const runs: number[] = [];
    const PERIOD = 1_000;
    for (let tick = 0; tick < 10; tick++) {
      await Promise.all(
        instances.map(async (instance) => {
          const lease = await instance.tryAcquire('cron:report', { ttlMs: PERIOD, renew: false });
          if (lease) runs.push(clock.monotonic());
        }),
      );
      await clock.advance(PERIOD / 4);
    }
    // 10 ticks over 2.5 periods: at most one run per period window, and at least two runs in all.
    expect(runs.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < runs.length; i++) {
      expect((runs[i] ?? 0) - (runs[i - 1] ?? 0)).toBeGreaterThanOrEqual(PERIOD);
    }
  });
});

describe('what a second look found', () => {
  it('a renew: false lease is not deleted when its local window ends a little before the service lets it go', async () => {
    const { client, makeClient, clock, faulty } = harness();
    await client.acquire('cron:hourly', { ttlMs: TTL, renew: false });
    // The local window ends at ttl − drift (988 ms); the service holds the lease until 1,000 ms.
    await clock.advance(995);
    expect(faulty.counts.attempted.release).toBe(0);
    expect(await makeClient().tryAcquire('cron:hourly', { ttlMs: TTL, renew: false })).toBeNull();
  });

  it('close() after a pause past the window reports a loss, not a release', async () => {
    const { client, makeClient, clock, eventsOf } = harness();
    const onLost = vi.fn();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    clock.jump(1.5 * TTL);
    const successor = await makeClient().acquire('a', { ttlMs: TTL });
    await client.close();
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledWith(handle, 'expired');
    expect(
      eventsOf('released').filter((e) => e.name === 'a' && e.fencingToken === handle.fencingToken),
    ).toEqual([]);
    await expect(handle.release()).rejects.toBeInstanceOf(LockLostError);
    expect(successor.isHeld()).toBe(true);
  });

  it('a manual renew() in flight when close() runs settles (the handle was released: false)', async () => {
    const { client, clock, faulty } = harness({ operationTimeoutMs: 60_000 });
    const handle = await client.acquire('a', { ttlMs: 100 * TTL });
    faulty.dropRenewals();
    const renewing = outcome(handle.renew());
    await clock.advance(1);
    await client.close();
    await clock.advance(0);
    expect(renewing.done).toBe(true);
    expect(renewing.value).toBe(false);
    expect(handle.state).toBe('released');
    await expect(handle.renew()).resolves.toBe(false);
  });

  it('a renew: false handle still ends lost when its window closes after close()', async () => {
    const { client, clock } = harness();
    const onLost = vi.fn();
    const handle = await client.acquire('cron:report', { ttlMs: TTL, renew: false, onLost });
    await client.close();
    expect(handle.state).toBe('held');
    await clock.advance(TTL);
    expect(handle.state).toBe('lost');
    expect(onLost).toHaveBeenCalledWith(handle, 'expired');
  });

  it('an answer processed after the window closed, before the tick that would have noticed, does not revive', async () => {
    const { client, clock, faulty, eventsOf } = harness();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.latency(100);
    await clock.advanceUntil(() => faulty.counts.attempted.renew === 1, TTL, 1);
    // A pause past the window with the renewal's reply already due: the reply is handled before the tick.
    clock.jump(handle.expiresAt + 2 - clock.monotonic());
    await clock.advance(0);
    expect(faulty.counts.forwarded.renew).toBe(1);
    expect(handle.state).toBe('lost');
    expect(eventsOf('renewed')).toHaveLength(0);
  });

  it('release() says the lock was lost when the service had nothing of this grant to delete', async () => {
    const { client, memory } = harness();
    const onLost = vi.fn();
    const handle = await client.acquire('a', { ttlMs: TTL, onLost });
    // Deleted behind the holder's back (by hand, a failover), well inside the window.
    await memory.release((handle as unknown as { lease: Parameters<MemoryLockService['release']>[0] }).lease);
    const error = await handle.release().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).reason).toBe('rejected');
  });

  it('a reentrant acquire must ask for the same renew setting as the handle it would share', async () => {
    const { client } = harness();
    await client.acquire('a', { ttlMs: TTL, reentrant: true, renew: false });
    await expect(client.acquire('a', { ttlMs: TTL, reentrant: true })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'options.renew',
    });
  });

  it('a grant with a nonsensical roundTripMs is refused as malformed, never admitted unchecked', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const service: LockService = {
      async acquire(request) {
        const result = await memory.acquire(request);
        return result.acquired
          ? { acquired: true, grant: { ...result.grant, roundTripMs: Number.NaN } }
          : result;
      },
      renew: (request) => memory.renew(request),
      release: (lease) => memory.release(lease),
      watch: (name, cb) => memory.watch(name, cb),
    };
    const error = await new LockClient(service, { clock })
      .acquire('a', { ttlMs: TTL })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'TRANSPORT' });
  });

  it("withLock keeps fn's own error after close(); only the signal's reason becomes ClientClosedError", async () => {
    const { client, clock } = harness();
    const own = new Error('fn failed on its own');
    const run = outcome(
      client.withLock('a', { ttlMs: TTL }, async () => {
        void client.close();
        await clock.sleep(10);
        throw own;
      }),
    );
    await clock.advance(50);
    expect(run.error).toBe(own);
  });

  it('one nonsense slot in a renewal batch fails that lease only', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let poison = false;
    const service: LockService = {
      acquire: (request) => memory.acquire(request),
      renew: (request) => memory.renew(request),
      async renewMany(requests) {
        const results = await memory.renewMany(requests);
        return poison ? [null as unknown as (typeof results)[number], ...results.slice(1)] : results;
      },
      release: (lease) => memory.release(lease),
      watch: (name, cb) => memory.watch(name, cb),
    };
    const client = new LockClient(service, { clock });
    const a = await client.acquire('a', { ttlMs: TTL });
    const b = await client.acquire('b', { ttlMs: TTL });
    poison = true;
    await clock.advance(TTL / 2);
    poison = false;
    await clock.advance(3 * TTL);
    // The poisoned slot counted as one failed renewal, retried in the window; nobody was stuck "in flight".
    expect(a.state).toBe('held');
    expect(b.state).toBe('held');
  });
});

describe('a service that fails with a value nothing can read', () => {
  /** A revoked Proxy: reading any property of it throws. */
  const unreadable = (): object => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy;
  };

  it('settles the call with a TransportError, and a renewal failing so does not strand the handle', async () => {
    const clock = new FakeClock({ seed: 1 });
    let failing = true;
    class Unreadable extends MemoryLockService {
      override acquire(request: AcquireRequest): Promise<AcquireResult> {
        return failing ? Promise.reject(unreadable()) : super.acquire(request);
      }
      override renew(
        ...args: Parameters<MemoryLockService['renew']>
      ): ReturnType<MemoryLockService['renew']> {
        return failing ? Promise.reject(unreadable()) : super.renew(...args);
      }
    }
    const service: LockService = new Unreadable({ clock });
    const client = new LockClient(service, { clock, operationTimeoutMs: 500, renewFailBudget: 3 });
    // Reading the brand of what the service threw threw in turn, and the call it failed never settled.
    const refused = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 0 }));
    await clock.advance(1_000);
    expect(refused.done).toBe(true);
    expect((refused.error as Error).name).toBe('TransportError');

    failing = false;
    const handle = await client.acquire('a', { ttlMs: TTL });
    failing = true;
    const renewed = outcome(handle.renew());
    await clock.advance(0);
    expect(renewed.done).toBe(true);
    expect((renewed.error as Error).name).toBe('TransportError');
    // The failed renewal is over: the next one goes out and, answered, keeps the lock.
    failing = false;
    await expect(handle.renew()).resolves.toBe(true);
    expect(handle.isHeld()).toBe(true);
    await handle.release();
    await client.close();
  });
});
