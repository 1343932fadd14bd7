import {
  LockClient,
  type LockService,
  MemoryLockService,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { outcome } from './harness.js';

/** Renewals the test answers itself: each is held until the test resolves or rejects it. */
function heldRenewals(memory: MemoryLockService) {
  const held: { request: RenewRequest; resolve: (r: RenewResult) => void; reject: (e: Error) => void }[] = [];
  const service: LockService = {
    acquire: (r) => memory.acquire(r),
    renew: (request) =>
      new Promise<RenewResult>((resolve, reject) => held.push({ request, resolve, reject })),
    release: (l) => memory.release(l),
    watch: (n, cb) => memory.watch(n, cb),
  };
  return { service, held };
}

describe('one renewal per lease in flight', () => {
  it("renew() joining a reentrant acquire's renewal counts its failure against renewFailBudget", async () => {
    const clock = new FakeClock({ seed: 1 });
    const memory = new MemoryLockService({ clock });
    const { service, held } = heldRenewals(memory);
    const a = new LockClient(service, { clock, renewFailBudget: 1 });
    const first = await a.acquire('x', { ttlMs: 30_000, reentrant: true });
    const nested = outcome(a.acquire('x', { ttlMs: 60_000, reentrant: true, waitMs: 0 }));
    await clock.advance(0);
    expect(held.map((h) => h.request.ttlMs)).toEqual([60_000]);
    const renewed = outcome(first.renew()); // joins the nested acquire's renewal: no second request
    await clock.advance(0);
    expect(held.length).toBe(1);
    held.shift()?.reject(new TransportError('unreachable'));
    await clock.advance(0);
    expect(renewed.error).toBeInstanceOf(TransportError);
    expect(nested.done).toBe(true);
    expect(first.state).toBe('lost');
    await a.close().catch(() => {});
  });

  it('a reentrant acquire queued behind two renewals still settles within waitMs + operationTimeoutMs', async () => {
    const clock = new FakeClock({ seed: 1 });
    const memory = new MemoryLockService({ clock });
    const { service, held } = heldRenewals(memory);
    const a = new LockClient(service, { clock, operationTimeoutMs: 5_000 });
    await a.acquire('x', { ttlMs: 60_000, reentrant: true });
    await clock.advanceUntil(() => held.length === 1, 30_000); // the scheduler's renewal, never answered
    await clock.advance(1_000);
    const startedAt = clock.monotonic();
    const longWait = outcome(a.acquire('x', { ttlMs: 120_000, reentrant: true, waitMs: 10_000 }));
    // Both wait for the scheduler's renewal; then the first sends its own, bounded by its longer wait, and the
    // second waits for that one.
    const noWait = outcome(a.acquire('x', { ttlMs: 240_000, reentrant: true, waitMs: 0 }));
    await clock.advanceUntil(() => noWait.done, 20_000);
    expect(noWait.error).toBeInstanceOf(TransportError);
    expect(clock.monotonic() - startedAt).toBeLessThanOrEqual(5_000);
    await clock.advanceUntil(() => longWait.done, 30_000);
    await a.close().catch(() => {});
  });

  it('a short renewal that timed out here and is applied late cannot leave the window longer than the lease', async () => {
    const clock = new FakeClock({ seed: 1 });
    const memory = new MemoryLockService({ clock });
    const { service, held } = heldRenewals(memory);
    const a = new LockClient(service, { clock, operationTimeoutMs: 2_000 });
    const first = await a.acquire('x', { ttlMs: 10_000, reentrant: true });
    await clock.advanceUntil(() => held.length === 1, 10_000); // the scheduler's renew(10000) goes out...
    const stale = held.shift()!;
    await clock.advance(2_000); // ... and times out here, while the service has it still
    const nested = outcome(a.acquire('x', { ttlMs: 60_000, reentrant: true, waitMs: 0 }));
    await clock.advanceUntil(() => held.length > 0, 1_000);
    for (const h of held.splice(0)) h.resolve(await memory.renew(h.request)); // applied and answered
    await clock.advanceUntil(() => nested.done, 1_000);
    expect(nested.value).toBe(first);
    stale.resolve(await memory.renew(stale.request)); // the stale one is applied now (its answer is ignored)
    // Whatever renewals go out from here on cannot reach the service.
    const answerDown = (): void => {
      for (const h of held.splice(0)) h.reject(new TransportError('down'));
    };
    for (let i = 0; i < 110; i += 1) {
      answerDown();
      await clock.advance(100);
    }
    const other = new LockClient(memory, { clock });
    const taken = await other.tryAcquire('x', { ttlMs: 1_000 });
    expect({ heldHere: first.isHeld(), takenElsewhere: taken !== null }).not.toEqual({
      heldHere: true,
      takenElsewhere: true,
    });
    await other.close();
    answerDown();
    await a.close().catch(() => {});
  });
});
