import {
  type AcquireRequest,
  type AcquireResult,
  AcquireTimeoutError,
  ClientClosedError,
  LockClient,
  type LockService,
  MemoryLockService,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { validUntil } from '../src/timing.js';
import { harness, outcome } from './harness.js';

const TTL = 3_000;

describe('waiting for a busy lock', () => {
  it('rejects AcquireTimeoutError at once when waitMs is 0 (default)', async () => {
    const { client, makeClient, faulty } = harness();
    await client.acquire('a', { ttlMs: TTL });
    const other = makeClient();
    const error = await other.acquire('a', { ttlMs: TTL }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AcquireTimeoutError);
    expect(error).toMatchObject({ code: 'ACQUIRE_TIMEOUT', lockName: 'a', attempts: 1 });
    expect(faulty.counts.attempted.acquire).toBe(2);
    expect(await other.tryAcquire('a', { ttlMs: TTL })).toBeNull();
  });

  it('never sleeps past the wait budget and settles at waitMs exactly', async () => {
    const { client, makeClient, clock } = harness({ retry: { baseMs: 400, capMs: 400 } });
    await client.acquire('a', { ttlMs: 60_000 });
    const other = makeClient();
    const start = clock.monotonic();
    const pending = outcome(other.acquire('a', { ttlMs: TTL, waitMs: 1_000 }));
    await clock.advanceUntil(() => pending.done, 2_000);
    expect(pending.error).toBeInstanceOf(AcquireTimeoutError);
    expect(clock.monotonic() - start).toBeLessThanOrEqual(1_000 + 1);
  });

  it('is woken by the release notice, long before its backoff would end', async () => {
    const { client, makeClient, clock } = harness({ retry: { baseMs: 10_000, capMs: 10_000 } });
    const first = await client.acquire('a', { ttlMs: 60_000 });
    const waiter = makeClient();
    const pending = outcome(waiter.acquire('a', { ttlMs: TTL, waitMs: 30_000 }));
    await clock.advance(100);
    await first.release();
    await clock.advance(0);
    expect(pending.done).toBe(true);
    expect((pending.value as { fencingToken: bigint }).fencingToken).toBe(2n);
    expect(clock.monotonic()).toBe(100);
  });

  it('uses the expiry hint to take over a dead holder promptly', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    // A holder that never renews: acquire directly on the service.
    await memory.acquire({
      name: 'a',
      ownerId: 'dead',
      ttlMs: 2_000,
      waitMs: 0,
      signal: new AbortController().signal,
    });
    let attempts = 0;
    const counting: LockService = {
      acquire: (r) => {
        attempts += 1;
        return memory.acquire(r);
      },
      renew: (r) => memory.renew(r),
      release: (l) => memory.release(l),
      watch: (n, cb) => memory.watch(n, cb),
    };
    const waiter = new LockClient(counting, { clock, retry: { baseMs: 50, capMs: 60_000 } });
    const pending = outcome(waiter.acquire('a', { ttlMs: TTL, waitMs: 30_000 }));
    await clock.advanceUntil(() => pending.done, 30_000);
    expect(pending.value).toBeDefined();
    expect(clock.monotonic()).toBeGreaterThanOrEqual(2_000);
    expect(clock.monotonic()).toBeLessThan(2_000 + 50);
    expect(attempts).toBe(2); // one attempt that learned the hint, one at the expiry: no polling in between
  });

  it('backs off with full jitter, bounded by capMs, when the service gives no hint and no notice', async () => {
    const clock = new FakeClock({ seed: 7 });
    const times: number[] = [];
    const busy: LockService = {
      acquire: async () => {
        times.push(clock.monotonic());
        return { acquired: false };
      },
      renew: async () => ({ renewed: false }),
      release: async () => false,
      watch: () => () => {},
    };
    const client = new LockClient(busy, { clock, retry: { baseMs: 50, capMs: 400 } });
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advanceUntil(() => pending.done, 6_000);
    expect(pending.error).toBeInstanceOf(AcquireTimeoutError);
    const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
    gaps.forEach((gap, i) => {
      expect(gap).toBeLessThanOrEqual(Math.min(400, 50 * 2 ** i) + 0.001);
    });
    expect(Math.max(...gaps)).toBeGreaterThan(50); // it did grow
    expect(times.length).toBeGreaterThan(10);
  });

  it('abort during the wait rejects with the signal reason and leaves nothing behind', async () => {
    const { client, makeClient, clock, memory } = harness();
    await client.acquire('a', { ttlMs: 60_000 });
    const waiter = makeClient();
    const controller = new AbortController();
    const pending = outcome(waiter.acquire('a', { ttlMs: TTL, waitMs: 30_000, signal: controller.signal }));
    await clock.advance(500);
    const reason = new Error('user cancelled');
    controller.abort(reason);
    await clock.advance(0);
    expect(pending.error).toBe(reason);
    expect(clock.monotonic()).toBe(500);
    expect(waiter.heldCount).toBe(0);
    expect(memory.holder('a')).toBe(1n);
  });

  it('an already-aborted signal rejects before any network call', async () => {
    const { client, faulty } = harness();
    const reason = new Error('nope');
    await expect(client.acquire('a', { ttlMs: TTL, signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(faulty.counts.attempted.acquire).toBe(0);
  });

  it('a hung service settles within waitMs + operationTimeoutMs as a TransportError', async () => {
    const { client, clock, faulty } = harness({ operationTimeoutMs: 700 });
    faulty.partition('hang');
    const start = clock.monotonic();
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 300 }));
    await clock.advanceUntil(() => pending.done, 5_000);
    expect(pending.error).toBeInstanceOf(TransportError);
    expect(clock.monotonic() - start).toBeLessThanOrEqual(300 + 700);
    faulty.heal();
  });

  it('keeps retrying through transport errors within the budget and reports the last one', async () => {
    const { client, clock, faulty } = harness();
    faulty.partition('fail');
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 1_000 }));
    await clock.advanceUntil(() => pending.done, 2_000);
    expect(pending.error).toBeInstanceOf(TransportError);
    expect(faulty.counts.attempted.acquire).toBeGreaterThan(2);
    faulty.heal();
    const ok = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 1_000 }));
    faulty.failNext(2);
    await clock.advanceUntil(() => ok.done, 2_000);
    expect(ok.value).toBeDefined();
  });

  it('releases a grant that arrives after the call was abandoned (no orphan lock)', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    let answer: (() => void) | undefined;
    const slow: LockService = {
      acquire: (request) =>
        new Promise<AcquireResult>((resolve) => {
          answer = () => void memory.acquire(request).then(resolve);
        }),
      renew: (r) => memory.renew(r),
      release: (l) => memory.release(l),
      watch: (n, cb) => memory.watch(n, cb),
    };
    const client = new LockClient(slow, { clock, operationTimeoutMs: 500 });
    const pending = outcome(client.acquire('a', { ttlMs: 60_000 }));
    await clock.advance(500);
    expect(pending.error).toBeInstanceOf(TransportError);
    answer?.(); // the service grants after all
    await clock.advance(0);
    expect(memory.holder('a')).toBeUndefined();
  });

  it('never hands out a grant whose window closed in transit; releases it instead', async () => {
    const { client, clock, faulty, memory } = harness({ operationTimeoutMs: 10_000 });
    faulty.latency(150); // each call takes 150 ms
    const pending = outcome(client.acquire('a', { ttlMs: 100, waitMs: 0 }));
    await clock.advanceUntil(() => pending.done, 1_000);
    expect(pending.error).toBeInstanceOf(AcquireTimeoutError);
    await clock.advance(1_000);
    expect(memory.holder('a')).toBeUndefined();
  });

  it('lets a queueing service wait server-side within the budget, and tells it when the caller gives up', async () => {
    const clock = new FakeClock();
    const seen: AcquireRequest[] = [];
    let abortedWith: unknown;
    const queueing: LockService = {
      acquire: (request) => {
        seen.push(request);
        return new Promise<AcquireResult>((resolve) => {
          request.signal.addEventListener('abort', () => {
            abortedWith = request.signal.reason;
            resolve({ acquired: false });
          });
        });
      },
      renew: async () => ({ renewed: true }),
      release: async () => true,
      watch: () => () => {},
    };
    const client = new LockClient(queueing, { clock, operationTimeoutMs: 1_000 });
    const controller = new AbortController();
    const pending = outcome(client.acquire('q', { ttlMs: TTL, waitMs: 5_000, signal: controller.signal }));
    await clock.advance(0);
    expect(seen).toHaveLength(1);
    expect(seen[0]?.waitMs).toBe(5_000);
    await clock.advance(2_000);
    expect(pending.done).toBe(false); // the service is holding the caller in its queue
    controller.abort(new Error('stop'));
    await clock.advance(0);
    expect((pending.error as Error).message).toBe('stop');
    expect((abortedWith as Error).message).toBe('stop');
  });

  it('close ends a server-side wait at once and tells the service, even one that reads the signal late', async () => {
    const clock = new FakeClock();
    const requests: AcquireRequest[] = [];
    const queueing: LockService = {
      // Never answers, and never looks at request.signal while the call is in flight.
      acquire: (request) => {
        requests.push(request);
        return new Promise<AcquireResult>(() => {});
      },
      renew: async () => ({ renewed: true }),
      release: async () => true,
      watch: () => () => {},
    };
    const client = new LockClient(queueing, { clock, operationTimeoutMs: 1_000 });
    const pending = outcome(client.acquire('q', { ttlMs: TTL, waitMs: 60_000 }));
    await clock.advance(0);
    expect(requests).toHaveLength(1);
    const closing = client.close();
    await clock.advance(0);
    expect(pending.error).toBeInstanceOf(ClientClosedError);
    // First read after the call was abandoned: already aborted, with the close as the reason.
    const signal = requests[0]?.signal;
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toBe(pending.error);
    await closing;
  });

  it('anchors a queued grant at the winning request (queuedMs), not at the call start', async () => {
    const clock = new FakeClock();
    const queuedFor = 2 * TTL;
    const queueing: LockService = {
      acquire: async () => {
        await clock.sleep(queuedFor);
        return {
          acquired: true,
          grant: { ownershipToken: 'o', fencingToken: 1n, ttlMs: TTL, queuedMs: queuedFor },
        };
      },
      renew: async () => ({ renewed: true }),
      release: async () => true,
      watch: () => () => {},
    };
    const client = new LockClient(queueing, { clock, driftFactor: 0 });
    const start = clock.monotonic();
    const pending = outcome(client.acquire('q', { ttlMs: TTL, waitMs: 3 * TTL }));
    await clock.advanceUntil(() => pending.done, 3 * TTL);
    const handle = pending.value;
    expect(handle?.isHeld()).toBe(true);
    expect(handle?.expiresAt).toBe(validUntil(start + queuedFor, TTL, 0));
  });

  it('ignores a queuedMs that claims the TTL started after the answer arrived', async () => {
    const clock = new FakeClock();
    const queueing: LockService = {
      acquire: async () => ({
        acquired: true,
        grant: { ownershipToken: 'o', fencingToken: 1n, ttlMs: TTL, queuedMs: 10 * TTL },
      }),
      renew: async () => ({ renewed: true }),
      release: async () => true,
      watch: () => () => {},
    };
    const client = new LockClient(queueing, { clock, driftFactor: 0 });
    const start = clock.monotonic();
    const handle = await client.acquire('q', { ttlMs: TTL });
    expect(handle.expiresAt).toBe(validUntil(start, TTL, 0));
  });
});

describe('a misbehaving watch', () => {
  it('falls back to backoff when watch() throws', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const service: LockService = {
      acquire: (r) => memory.acquire(r),
      renew: (r) => memory.renew(r),
      release: (l) => memory.release(l),
      watch: () => {
        throw new Error('watch unavailable');
      },
    };
    const holder = new LockClient(service, { clock });
    const waiter = new LockClient(service, { clock, retry: { baseMs: 50, capMs: 200 } });
    const first = await holder.acquire('a', { ttlMs: 60_000 });
    const pending = outcome(waiter.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(300);
    await first.release();
    await clock.advanceUntil(() => pending.done, 1_000);
    expect(pending.value).toBeDefined();
    expect(clock.monotonic()).toBeLessThanOrEqual(300 + 200);
  });
});
