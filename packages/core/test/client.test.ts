import {
  type AcquireRequest,
  ClientClosedError,
  type Lease,
  LockClient,
  type LockEventMap,
  type LockService,
  MemoryLockService,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 3_000;

describe('withLock', () => {
  it('runs the function with the handle and releases afterwards', async () => {
    const { client, memory } = harness();
    const result = await client.withLock('a', { ttlMs: TTL }, async (handle) => {
      expect(memory.holder('a')).toBe(handle.fencingToken);
      return 'done';
    });
    expect(result).toBe('done');
    expect(memory.holder('a')).toBeUndefined();
  });

  it('releases when the function throws, and rethrows its error', async () => {
    const { client, memory } = harness();
    const boom = new Error('boom');
    await expect(
      client.withLock('a', { ttlMs: TTL }, async () => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(memory.holder('a')).toBeUndefined();
  });
});

describe('onRelease', () => {
  it('calls back on release until unsubscribed; a throwing callback is reported', async () => {
    const { client, makeClient, clock, eventsOf } = harness();
    const other = makeClient();
    let calls = 0;
    const unsubscribe = client.onRelease('a', () => {
      calls += 1;
      throw new Error('listener bug');
    });
    const h1 = await other.acquire('a', { ttlMs: TTL });
    await h1.release();
    await clock.advance(0);
    expect(calls).toBe(1);
    expect(eventsOf('callback-error')).toMatchObject([{ source: 'onRelease callback' }]);
    unsubscribe();
    unsubscribe();
    const h2 = await other.acquire('a', { ttlMs: TTL });
    await h2.release();
    await clock.advance(0);
    expect(calls).toBe(1);
  });

  it('a watch that throws synchronously becomes a TransportError naming the lock, never a raw exception', () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const cause = new Error('subscriber connection gone');
    const service: LockService = {
      acquire: (request) => memory.acquire(request),
      renew: (request) => memory.renew(request),
      release: (lease) => memory.release(lease),
      watch: () => {
        throw cause;
      },
    };
    const client = new LockClient(service, { clock });
    let thrown: unknown;
    try {
      client.onRelease('a', () => {});
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(TransportError);
    expect(thrown).toMatchObject({ code: 'TRANSPORT', cause });
    expect((thrown as Error).message).toContain('"a"');
  });
});

describe('constructor', () => {
  it('a watchLeases that throws becomes a TransportError from the constructor, never a raw exception', () => {
    const memory = new MemoryLockService();
    const cause = new Error('session registry unavailable');
    const service: LockService = {
      acquire: (request) => memory.acquire(request),
      renew: (request) => memory.renew(request),
      release: (lease) => memory.release(lease),
      watch: (name, onReleased) => memory.watch(name, onReleased),
      watchLeases: () => {
        throw cause;
      },
    };
    let thrown: unknown;
    try {
      new LockClient(service);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(TransportError);
    expect(thrown).toMatchObject({ code: 'TRANSPORT', cause });
  });
});

describe('close()', () => {
  it('is idempotent, releases held handles, rejects pending acquires and any later call', async () => {
    const { client, makeClient, memory, clock } = harness();
    const other = makeClient();
    const held = await client.acquire('a', { ttlMs: TTL });
    const nested = await client.acquire('b', { ttlMs: TTL, reentrant: true });
    await client.acquire('b', { ttlMs: TTL, reentrant: true });
    await other.acquire('c', { ttlMs: TTL });
    const waiting = outcome(client.acquire('c', { ttlMs: TTL, waitMs: 60_000 }));
    let notices = 0;
    client.onRelease('c', () => {
      notices += 1;
    });
    await clock.advance(10);
    const first = client.close();
    const second = client.close();
    expect(second).toBe(first);
    await first;
    await clock.advance(0);
    expect(held.state).toBe('released');
    expect(nested.state).toBe('released');
    expect(memory.holder('a')).toBeUndefined();
    expect(memory.holder('b')).toBeUndefined();
    expect(waiting.error).toBeInstanceOf(ClientClosedError);
    await expect(client.acquire('x', { ttlMs: TTL })).rejects.toBeInstanceOf(ClientClosedError);
    await expect(client.tryAcquire('x', { ttlMs: TTL })).rejects.toBeInstanceOf(ClientClosedError);
    expect(() => client.onRelease('x', () => {})).toThrow(ClientClosedError);
    await other.close();
    await clock.advance(0);
    expect(notices).toBe(0); // watches were closed
  });

  it('leaves no timer behind', async () => {
    const clock = new FakeClock();
    const client = new LockClient(new MemoryLockService({ clock }), { clock });
    await client.acquire('a', { ttlMs: TTL });
    // The renewal scheduler's timer and the one shared timer bounding service calls.
    expect(clock.pendingTimers).toBe(2);
    await client.close();
    await clock.advance(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('retries a release that failed on a transient transport error, so the lock is freed, not left to its TTL', async () => {
    const { client, clock, faulty, memory, eventsOf } = harness({ operationTimeoutMs: 1_000 });
    await client.acquire('a', { ttlMs: TTL });
    faulty.failNext(1); // one reset connection, just as close() releases
    const closing = outcome(client.close());
    await clock.advanceUntil(() => closing.done, 1_000);
    expect(closing.error).toBeUndefined();
    expect(faulty.counts.attempted.release).toBe(2);
    expect(memory.holder('a')).toBeUndefined();
    expect(eventsOf('released').map((e) => e.result)).toEqual(['deleted']);
  });

  it('a retry that finds nothing after a try whose reply was lost does not claim the lock was taken', async () => {
    const clock = new FakeClock();
    // The first release deletes the lock and its reply is lost (a reset after the write): close() retries.
    class LostReplies extends MemoryLockService {
      lose = 0;
      override async release(lease: Lease): Promise<boolean> {
        const deleted = await super.release(lease);
        if (this.lose > 0) {
          this.lose -= 1;
          throw new TransportError('connection reset after the delete');
        }
        return deleted;
      }
    }
    const memory = new LostReplies({ clock });
    const released: LockEventMap['released'][] = [];
    const client = new LockClient(memory, { clock, operationTimeoutMs: 1_000 });
    client.events.on('released', (event) => released.push(event));
    await client.acquire('a', { ttlMs: TTL });
    memory.lose = 1;
    const closing = outcome(client.close());
    await clock.advanceUntil(() => closing.done, 1_000);
    expect(closing.error).toBeUndefined();
    expect(released.map((e) => [e.result, e.afterUnansweredTry])).toEqual([['not-found', true]]);
    // A not-found with no try before it is the lock taken from its holder, as ever: no flag.
    const other = new LockClient(memory, { clock });
    const taken: LockEventMap['released'][] = [];
    other.events.on('released', (event) => taken.push(event));
    const handle = await other.acquire('b', { ttlMs: TTL });
    await memory.release({ ...(handle as unknown as { lease: Lease }).lease });
    await other.close();
    expect(taken.map((e) => [e.result, e.afterUnansweredTry])).toEqual([['not-found', undefined]]);
  });

  it('rejects with a TransportError naming every lock it could not release, within operationTimeoutMs', async () => {
    const { client, clock, faulty, memory, eventsOf } = harness({ operationTimeoutMs: 1_000 });
    const a = await client.acquire('a', { ttlMs: TTL });
    const b = await client.acquire('b', { ttlMs: TTL });
    await client.acquire('c', { ttlMs: TTL });
    faulty.failNext(1); // the first release fails once and is retried
    const closing = outcome(client.close());
    await clock.advance(0);
    faulty.partition('fail'); // the service is gone for the others' retries
    await clock.advance(1_000);
    expect(closing.done).toBe(true);
    const error = closing.error as TransportError;
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toMatch(/could not release 1 of 3 .*may stay held until its TTL/);
    expect(error.cause).toBeInstanceOf(AggregateError);
    expect((error.cause as AggregateError).errors).toHaveLength(1);
    // Every handle ended locally all the same; the one the service did not hear of runs out by its TTL.
    expect([a.state, b.state]).toEqual(['released', 'released']);
    const held = ['a', 'b', 'c'].filter((name) => memory.holder(name) !== undefined);
    expect(held).toHaveLength(1);
    expect(
      eventsOf('released')
        .filter((e) => e.result === 'failed')
        .map((e) => e.name),
    ).toEqual(held);
    // close() is idempotent: a second call reports the same outcome.
    await expect(client.close()).rejects.toBe(error);
    faulty.heal();
  });

  it('settles within operationTimeoutMs even when the service hangs on release', async () => {
    const { client, clock, faulty } = harness({ operationTimeoutMs: 800 });
    await client.acquire('a', { ttlMs: TTL });
    faulty.partition('hang');
    const closing = outcome(client.close());
    await clock.advance(800);
    expect(closing.done).toBe(true);
    faulty.heal();
  });
});

describe('renewal at scale', () => {
  it('10,000 held handles use two timers, and renewals due together go out in batches', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let batches = 0;
    let renewed = 0;
    const service: LockService = {
      acquire: (r) => memory.acquire(r),
      renew: (r) => memory.renew(r),
      renewMany: (requests) => {
        batches += 1;
        renewed += requests.length;
        return memory.renewMany(requests);
      },
      release: (l) => memory.release(l),
      watch: (n, cb) => memory.watch(n, cb),
    };
    const client = new LockClient(service, { clock });
    const handles = await Promise.all(
      Array.from({ length: 10_000 }, (_, i) => client.acquire(`lock-${i}`, { ttlMs: TTL })),
    );
    expect(clock.pendingTimers).toBeLessThanOrEqual(2); // renewal scheduler + call deadlines, whatever the count
    await clock.advance(10 * TTL);
    expect(handles.every((h) => h.state === 'held')).toBe(true);
    expect(clock.pendingTimers).toBeLessThanOrEqual(2);
    // Each handle renews ~3 times per TTL: ~300,000 renewals over 10 TTLs, in a few hundred batches at most.
    expect(renewed).toBeGreaterThanOrEqual(10_000 * 28);
    expect(batches).toBeLessThanOrEqual(10 * 3 * 10);
    await client.close();
  }, 60_000);
});

describe('a service whose unsubscribe functions throw', () => {
  // A subscription is best effort; tearing one down must not decide how an acquire or close() ends.
  function throwingUnsubscribes() {
    const clock = new FakeClock({ seed: 3 });
    const memory = new MemoryLockService({ clock });
    const unsubscribeFails = (): (() => void) => () => {
      throw new Error('unsubscribe failed');
    };
    const service: LockService = {
      acquire: (request) => memory.acquire(request),
      renew: (request) => memory.renew(request),
      release: (lease) => memory.release(lease),
      watch: (name, onReleased) => {
        memory.watch(name, onReleased);
        return unsubscribeFails();
      },
      watchLeases: () => unsubscribeFails(),
      inspect: (name) => memory.inspect(name),
      updateMetadata: (lease, metadata) => memory.updateMetadata(lease, metadata),
      watchChanges: (name, onChange) => {
        memory.watchChanges(name, onChange);
        return unsubscribeFails();
      },
    };
    return { clock, memory, client: new LockClient(service, { clock }) };
  }

  it('an acquire that waited returns its handle, not the unsubscribe error with the lock left held', async () => {
    const { clock, memory, client } = throwingUnsubscribes();
    const other = new LockClient(memory, { clock });
    const blocker = await other.acquire('a', { ttlMs: TTL });
    const waiting = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 10_000 }));
    await clock.advance(100);
    await blocker.release();
    await clock.advanceUntil(() => waiting.done, 5_000);
    expect(waiting.error).toBeUndefined();
    expect(waiting.value?.isHeld()).toBe(true);
    expect(memory.holder('a')).toBe(waiting.value?.fencingToken);
    await client.close();
    await other.close();
  });

  it('close() still releases held handles, resolves, and ends observers without an uncaught error', async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown): void => {
      uncaught.push(error);
    };
    process.on('uncaughtException', onUncaught);
    try {
      const { clock, memory, client } = throwingUnsubscribes();
      const handle = await client.acquire('a', { ttlMs: TTL });
      client.onRelease('b', () => {});
      const observer = client.election('e', { ttlMs: TTL }).observe()[Symbol.asyncIterator]();
      const first = outcome(observer.next());
      await clock.advance(0);
      expect(first.done).toBe(true);
      const closed = outcome(client.close());
      await clock.advance(0);
      expect(closed.done).toBe(true);
      expect(closed.error).toBeUndefined();
      expect(handle.state).toBe('released');
      expect(memory.holder('a')).toBeUndefined();
      // An EventTarget listener's exception surfaces as an uncaught exception on a later turn.
      await new Promise((resolve) => setImmediate(resolve));
      expect(uncaught).toEqual([]);
      expect(clock.pendingTimers).toBe(0);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });
});

describe('a service whose methods do not return promises', () => {
  it('plain values are taken as answers, a throwing then as a failure: every call settles, nothing goes unhandled', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const thenThrows = {
      // biome-ignore lint/suspicious/noThenProperty: a thenable whose then throws is the input under test
      then: () => {
        throw new Error('broken then');
      },
    };
    let grant: unknown;
    const service = {
      acquire: (request: AcquireRequest) => {
        // The memory service answers synchronously underneath: hand on its value, not its promise.
        void memory.acquire(request).then((result) => {
          grant = result;
        });
        return grant ?? { acquired: false };
      },
      renew: () => thenThrows,
      release: () => true,
      watch: () => () => {},
    } as unknown as LockService;
    const client = new LockClient(service, { clock, operationTimeoutMs: 1_000 });
    const first = outcome(client.tryAcquire('a', { ttlMs: 3_000 }));
    await clock.advance(0);
    expect(first.value).toBeNull();
    const second = outcome(client.tryAcquire('a', { ttlMs: 3_000 }));
    await clock.advance(0);
    const handle = second.value;
    expect(handle?.fencingToken).toBe(1n);
    const renewed = outcome(handle?.renew() ?? Promise.resolve(false));
    await clock.advance(0);
    expect(renewed.error).toBeInstanceOf(TransportError);
    const released = outcome(handle?.release() ?? Promise.resolve());
    await clock.advance(0);
    expect(released.done && released.error === undefined).toBe(true);
    // Past every call's bound: a deadline left behind by a call that threw would reject with nobody listening.
    await clock.advance(5_000);
    await client.close();
  });

  it('a native promise whose then throws is a failed call: it rejects, never throws, and leaves no deadline', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    /** A promise patched by some library so that its then throws (instanceof Promise all the same). */
    const brokenPromise = <T>(value: T): Promise<T> => {
      const promise = Promise.resolve(value);
      Object.defineProperty(promise, 'then', {
        value: () => {
          throw new Error('patched then broke');
        },
      });
      return promise;
    };
    const unhandled: unknown[] = [];
    const record = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', record);
    try {
      const service = {
        acquire: (request: AcquireRequest) => memory.acquire(request),
        renew: () => brokenPromise({ renewed: true }),
        release: () => brokenPromise(true),
        watch: () => () => {},
      } as unknown as LockService;
      const client = new LockClient(service, { clock, operationTimeoutMs: 1_000 });
      const handle = await client.acquire('a', { ttlMs: 3_000 });
      const renewed = outcome(Promise.resolve().then(() => handle.renew()));
      const released = outcome(Promise.resolve().then(() => handle.release()));
      await clock.advance(0);
      // A renewal the service could not be asked for is a failed renewal: renew() says false.
      expect(renewed).toMatchObject({ done: true, value: false });
      expect(released.error).toBeInstanceOf(TransportError);
      expect((released.error as TransportError).message).toContain('patched then broke');
      // Past every call's bound: a deadline left in the list would reject then with nobody listening.
      await clock.advance(5_000);
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      await client.close();
    } finally {
      process.off('unhandledRejection', record);
    }
  });
});
