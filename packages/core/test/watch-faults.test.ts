import { AcquireTimeoutError, type Leader, TransportError } from '@dlock/core';
import type { WatchFault } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { harness, outcome } from './harness.js';

/**
 * Watches are hints: a service that cannot set one up ('throw') or loses its notices ('silent') must leave every
 * call settling in its bound with a true answer, found by polling.
 */

const TTL = 1_000;
const RETRY = { baseMs: 50, capMs: 200 };

describe.each<WatchFault>(['throw', 'silent'])('a watch that fails (%s)', (mode) => {
  it('a waiter still takes the lock within a retry cap of its release, by polling', async () => {
    const { client, makeClient, clock, faulty } = harness({ retry: RETRY });
    const first = await makeClient().acquire('a', { ttlMs: 60_000 });
    faulty.failWatches(mode);
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(300);
    expect(pending.done).toBe(false);
    expect(faulty.counts.attempted.watch).toBe(1);
    expect(faulty.counts.forwarded.watch).toBe(mode === 'throw' ? 0 : 1);
    await first.release();
    const releasedAt = clock.monotonic();
    await clock.advanceUntil(() => pending.done, 5_000);
    expect(pending.value?.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(clock.monotonic() - releasedAt).toBeLessThanOrEqual(RETRY.capMs);
  });

  it('a lock freed just before the budget ends is taken, not reported held by another', async () => {
    const { client, makeClient, clock, faulty } = harness({ retry: RETRY });
    const first = await makeClient().acquire('a', { ttlMs: 60_000 });
    faulty.failWatches(mode);
    const startedAt = clock.monotonic();
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 1_000 }));
    await clock.advance(990);
    expect(pending.done).toBe(false);
    await first.release();
    await clock.advanceUntil(() => pending.done, 2_000);
    expect(pending.error).toBeUndefined();
    expect(pending.value?.isHeld()).toBe(true);
    expect(clock.monotonic() - startedAt).toBeLessThanOrEqual(1_000);
  });

  it('a waiter whose budget runs out settles at its deadline, held by another owner', async () => {
    const { client, makeClient, clock, faulty } = harness({ retry: RETRY });
    await makeClient().acquire('a', { ttlMs: 60_000 });
    faulty.failWatches(mode);
    const startedAt = clock.monotonic();
    const pending = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 1_000 }));
    await clock.advanceUntil(() => pending.done, 10_000);
    expect(clock.monotonic() - startedAt).toBe(1_000);
    expect(pending.error).toBeInstanceOf(AcquireTimeoutError);
    expect((pending.error as AcquireTimeoutError).reason).toBe('held-by-another-owner');
  });

  it('an observer still sees every leader change, within its poll of half a lease', async () => {
    const { client, makeClient, clock, faulty } = harness();
    faulty.failWatches(mode);
    const stop = new AbortController();
    const seen: (Leader | null)[] = [];
    const observing = (async () => {
      for await (const leader of makeClient().election('e', { ttlMs: TTL }).observe({ signal: stop.signal }))
        seen.push(leader);
    })().catch((error: unknown) => error);
    await clock.advance(1);
    expect(seen).toEqual([null]);
    const leading = await client.election('e', { ttlMs: TTL }).campaign({ value: 'a' });
    await clock.advance(TTL / 2);
    expect(seen).toEqual([null, { value: 'a', epoch: leading.epoch }]);
    await leading.resign();
    await clock.advance(TTL / 2);
    expect(seen).toEqual([null, { value: 'a', epoch: leading.epoch }, null]);
    stop.abort();
    await clock.advance(1);
    await observing;
  });
});

describe('onRelease on a watch that fails', () => {
  it('throw: onRelease throws the TransportError at once, no callback is left waiting', () => {
    const { client, faulty } = harness();
    faulty.failWatches('throw');
    expect(() => client.onRelease('a', () => {})).toThrow(TransportError);
    faulty.failWatches(false);
    expect(typeof client.onRelease('a', () => {})).toBe('function');
  });
});
