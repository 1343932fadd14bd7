import { AcquireTimeoutError, ClientClosedError, LockLostError, TransportError } from '@dlock/core';
import { describe, expect, it, vi } from 'vitest';
import { ATTRIBUTES as A, METRICS as M } from '../src/index.js';
import { outcome, setup } from './otel.js';

const TTL = 3_000;
const lock = { [A.kind]: 'lock' };

describe('acquire wait', () => {
  it('an acquire that gets its handle: outcome acquired, the wait in seconds', async () => {
    const { client, other, clock, histogram } = setup();
    const first = await other.acquire('a', { ttlMs: TTL });
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(250);
    await first.release();
    await vi.waitFor(() => expect(call.done).toBe(true));
    expect(call.value?.state).toBe('held');
    const [point] = await histogram(M.acquireWait);
    expect(point?.attributes).toEqual({ ...lock, [A.outcome]: 'acquired' });
    expect(point?.value).toMatchObject({ count: 1, sum: 0.25 });
  });

  it('a budget that runs out: outcome timeout; tryAcquire on a busy lock too', async () => {
    const { client, other, clock, histogram } = setup();
    await other.acquire('a', { ttlMs: 60_000 });
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 500 }));
    await clock.advance(500);
    expect(call.error).toBeInstanceOf(AcquireTimeoutError);
    expect(await client.tryAcquire('a', { ttlMs: TTL })).toBeNull();
    const points = await histogram(M.acquireWait);
    expect(points).toHaveLength(1);
    expect(points[0]?.attributes).toEqual({ ...lock, [A.outcome]: 'timeout' });
    expect(points[0]?.value).toMatchObject({ count: 2, sum: 0.5, min: 0, max: 0.5 });
  });

  it("the caller's signal and close(): outcome aborted", async () => {
    const { client, other, clock, histogram } = setup();
    await other.acquire('a', { ttlMs: 60_000 });
    const controller = new AbortController();
    const aborted = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000, signal: controller.signal }));
    await clock.advance(100);
    controller.abort(new Error('gave up'));
    const closed = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(300);
    await client.close();
    await clock.advance(0);
    expect(aborted.error).toEqual(new Error('gave up'));
    expect(closed.error).toBeInstanceOf(ClientClosedError);
    const points = await histogram(M.acquireWait);
    expect(points).toHaveLength(1);
    expect(points[0]?.attributes).toEqual({ ...lock, [A.outcome]: 'aborted' });
    expect(points[0]?.value).toMatchObject({ count: 2, sum: 0.4 });
  });

  it('a service that cannot be reached: outcome error', async () => {
    const { client, faulty, histogram } = setup();
    faulty.partition('fail');
    await expect(client.acquire('a', { ttlMs: TTL })).rejects.toBeInstanceOf(TransportError);
    const points = await histogram(M.acquireWait);
    expect(points.map((p) => p.attributes)).toEqual([{ ...lock, [A.outcome]: 'error' }]);
  });
});

describe('units', () => {
  it("durations are in seconds (unit s), as OpenTelemetry's semantic conventions ask, with buckets to match", async () => {
    const { client, clock, metrics, histogram } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(1_500);
    await handle.release();
    const recorded = await metrics();
    expect(recorded.get(M.acquireWait)?.descriptor.unit).toBe('s');
    expect(recorded.get(M.holdDuration)?.descriptor.unit).toBe('s');
    const [wait] = await histogram(M.acquireWait);
    expect(wait?.value.buckets.boundaries).toEqual([
      0, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
    ]);
    const [hold] = await histogram(M.holdDuration);
    expect(hold?.value.buckets.boundaries).toEqual([
      0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3_600,
    ]);
    expect(hold?.value.sum).toBe(1.5);
  });
});

describe('holds', () => {
  it('held goes up on a grant and down on release; the hold duration runs to release()', async () => {
    const { client, clock, points, histogram } = setup();
    const a = await client.acquire('a', { ttlMs: TTL });
    const b = await client.acquire('b', { ttlMs: TTL });
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 2 }]);
    await clock.advance(1_200);
    await a.release();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 1 }]);
    await b.release();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
    const [hold] = await histogram(M.holdDuration);
    expect(hold?.attributes).toEqual({ ...lock, [A.holdEnd]: 'released' });
    expect(hold?.value).toMatchObject({ count: 2, sum: 2.4 });
  });

  it('a reentrant acquire counts as an acquire, not as another hold', async () => {
    const { client, points, histogram } = setup();
    const outer = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    const inner = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(inner).toBe(outer);
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 1 }]);
    expect((await histogram(M.acquireWait))[0]?.value.count).toBe(2);
    await inner.release();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 1 }]);
    await outer.release();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
  });

  it('renewals count while held; failures count each failed renewal; a loss counts by reason', async () => {
    const { client, faulty, clock, points, histogram } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(2 * TTL);
    const renewals = (await points(M.renewals))[0];
    expect(renewals?.attributes).toEqual(lock);
    expect(renewals?.value).toBeGreaterThanOrEqual(4);
    expect(await points(M.renewalFailures)).toEqual([]);
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(handle.state).toBe('lost');
    const failures = (await points(M.renewalFailures))[0];
    expect(failures?.attributes).toEqual(lock);
    expect(failures?.value).toBeGreaterThanOrEqual(1);
    expect(await points(M.losses)).toEqual([
      { attributes: { ...lock, [A.reason]: 'unreachable' }, value: 1 },
    ]);
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
    const holds = await histogram(M.holdDuration);
    expect(holds.map((p) => p.attributes)).toEqual([{ ...lock, [A.holdEnd]: 'lost' }]);
    expect(holds[0]?.value.sum).toBeGreaterThan((2 * TTL) / 1_000);
  });

  it('a release the service found nothing for is a loss (reason rejected), as release() says', async () => {
    const { client, memory, points, histogram } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    vi.spyOn(memory, 'release').mockResolvedValueOnce(false);
    await expect(handle.release()).rejects.toBeInstanceOf(LockLostError);
    expect(await points(M.losses)).toEqual([{ attributes: { ...lock, [A.reason]: 'rejected' }, value: 1 }]);
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
    expect((await histogram(M.holdDuration)).map((p) => p.attributes)).toEqual([
      { ...lock, [A.holdEnd]: 'lost' },
    ]);
  });

  it("close()'s retried release that finds nothing after an unanswered try ends the hold unknown, not a loss", async () => {
    const { client, clock, faulty, memory, points, histogram, spans } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    const { lease } = handle as unknown as { lease: Parameters<typeof memory.release>[0] };
    // The first try fails with a transport error; as far as the client knows it may have deleted the lock (a reply
    // lost after the write), which is what the service shows the retry.
    faulty.failNext(1);
    const closing = outcome(client.close());
    await clock.advance(0);
    expect(await memory.release(lease)).toBe(true);
    await clock.advanceUntil(() => closing.done, 1_000);
    expect(closing.error).toBeUndefined();
    expect(faulty.counts.attempted.release).toBe(2);
    expect(await points(M.losses)).toEqual([]);
    // The retry's not-found shows neither that the first try deleted the lock nor that someone took it first.
    expect((await histogram(M.holdDuration)).map((p) => p.attributes)).toEqual([
      { ...lock, [A.holdEnd]: 'unknown' },
    ]);
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
    expect(spans('dlock.release').map((s) => s.attributes[A.releaseResult])).toEqual(['not-found']);
  });

  it('a lease granted once (renew: false) that runs out: lost, reason expired', async () => {
    const { client, clock, points } = setup();
    await client.acquire('a', { ttlMs: TTL, renew: false });
    await clock.advance(TTL);
    expect(await points(M.losses)).toEqual([{ attributes: { ...lock, [A.reason]: 'expired' }, value: 1 }]);
    expect(await points(M.renewals)).toEqual([]);
  });
});

describe('permits and leaderships', () => {
  it('permits carry kind permit (no slot without the name attribute); a timeout is no-free-permit', async () => {
    const { client, other, clock, points, histogram } = setup();
    await other.semaphore('pool', { permits: 2, ttlMs: TTL }).acquire();
    const pool = client.semaphore('pool', { permits: 2, ttlMs: TTL });
    const permit = await pool.acquire();
    const permitAttrs = { [A.kind]: 'permit' };
    expect(await points(M.held)).toEqual([{ attributes: permitAttrs, value: 1 }]);
    const waiting = outcome(pool.acquire({ waitMs: 200 }));
    await clock.advance(TTL);
    expect(waiting.error).toBeInstanceOf(AcquireTimeoutError);
    expect((await points(M.renewals))[0]?.attributes).toEqual(permitAttrs);
    await permit.release();
    expect(await points(M.held)).toEqual([{ attributes: permitAttrs, value: 0 }]);
    expect((await histogram(M.acquireWait)).map((p) => [p.attributes, p.value.count])).toEqual([
      [{ ...permitAttrs, [A.outcome]: 'acquired' }, 1],
      [{ ...permitAttrs, [A.outcome]: 'timeout' }, 1],
    ]);
  });

  it('a leadership is a lock: held while leading, released on resign', async () => {
    const { client, points } = setup();
    const leadership = await client.election('primary', { ttlMs: TTL }).campaign();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 1 }]);
    await leadership.resign();
    expect(await points(M.held)).toEqual([{ attributes: lock, value: 0 }]);
  });
});
