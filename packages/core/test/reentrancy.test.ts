import {
  LockClient,
  type LockService,
  MemoryLockService,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it, vi } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 3_000;

describe('in-process reentrancy', () => {
  it('returns the same handle and counts nested holds; only the last release reaches the service', async () => {
    const { client, faulty, memory, eventsOf } = harness();
    const outer = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    const inner = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    const innermost = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(inner).toBe(outer);
    expect(innermost).toBe(outer);
    expect(faulty.counts.attempted.acquire).toBe(1);
    expect(eventsOf('acquired').map((e) => e.reentered)).toEqual([false, true, true]);
    await innermost.release();
    await inner.release();
    expect(outer.state).toBe('held');
    expect(faulty.counts.attempted.release).toBe(0);
    await outer.release();
    expect(outer.state).toBe('released');
    expect(faulty.counts.attempted.release).toBe(1);
    expect(memory.holder('a')).toBeUndefined();
    await outer.release(); // one too many: a no-op
    expect(faulty.counts.attempted.release).toBe(1);
  });

  it('fans Lost out to every nested holder, once each', async () => {
    const { client, clock } = harness();
    const calls: string[] = [];
    const handle = await client.acquire('a', {
      ttlMs: TTL,
      reentrant: true,
      onLost: () => calls.push('outer'),
    });
    await client.acquire('a', { ttlMs: TTL, reentrant: true, onLost: () => calls.push('middle') });
    await client.acquire('a', { ttlMs: TTL, reentrant: true, onLost: () => calls.push('inner') });
    clock.jump(TTL);
    await clock.advance(TTL);
    expect(handle.state).toBe('lost');
    expect(calls).toEqual(['outer', 'middle', 'inner']);
  });

  it('a non-reentrant acquire of a name this client holds contends like any other owner', async () => {
    const { client, clock } = harness();
    const first = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(await client.tryAcquire('a', { ttlMs: TTL })).toBeNull();
    const waiting = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 10_000 }));
    await clock.advance(100);
    expect(waiting.done).toBe(false);
    await first.release();
    await clock.advance(0);
    expect(waiting.value).toBeDefined();
    expect(waiting.value).not.toBe(first);
  });

  it('a reentrant acquire does not reuse a non-reentrant handle', async () => {
    const { client } = harness();
    await client.acquire('a', { ttlMs: TTL });
    expect(await client.tryAcquire('a', { ttlMs: TTL, reentrant: true })).toBeNull();
  });

  it('two clients never share a lock by reentrancy: each has its own owner id', async () => {
    const { client, makeClient } = harness();
    const other = makeClient();
    expect(client.ownerId).not.toBe(other.ownerId);
    expect(client.ownerId).toMatch(/^.+:\d+:[0-9a-f]{12}$/);
    await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(await other.tryAcquire('a', { ttlMs: TTL, reentrant: true })).toBeNull();
  });

  it('a concurrent reentrant waiter joins the handle its own client obtained meanwhile', async () => {
    const { client, makeClient, clock } = harness();
    const other = makeClient();
    const blocker = await other.acquire('a', { ttlMs: TTL });
    const first = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 10_000, reentrant: true }));
    const second = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 10_000, reentrant: true }));
    await clock.advance(10);
    await blocker.release();
    await clock.advanceUntil(() => first.done && second.done, 5_000);
    expect(first.value).toBeDefined();
    expect(second.value).toBe(first.value);
  });

  it('does not hand out an expired handle to a reentrant caller', async () => {
    const onLost = vi.fn();
    const { client, clock } = harness();
    const old = await client.acquire('a', { ttlMs: TTL, reentrant: true, onLost });
    clock.jump(TTL);
    const fresh = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    expect(fresh).not.toBe(old);
    expect(fresh.fencingToken).toBeGreaterThan(old.fencingToken);
    await clock.advance(0);
    expect(old.state).toBe('lost');
    expect(onLost).toHaveBeenCalledTimes(1);
  });

  describe('a reentrant acquire gets at least the lease it asked for', () => {
    it('renew: false: the shared lease is extended to the requested TTL before it is handed out', async () => {
      const { client, clock, memory, faulty } = harness();
      const first = await client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true });
      await clock.advance(2_500); // 500 ms of the lease left
      const nested = await client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true });
      expect(nested).toBe(first);
      expect(faulty.counts.attempted.renew).toBe(1);
      // As much as a fresh grant of TTL would give: the TTL less the drift allowance (1% + 2 ms).
      expect(nested.expiresAt - clock.monotonic()).toBeGreaterThanOrEqual(TTL - (TTL * 0.01 + 2));
      expect((await memory.inspect('a')).expiresInMs).toBe(TTL);
      await clock.advance(2_500); // past the first grant's TTL: still held, on the service too
      expect(nested.isHeld()).toBe(true);
      expect(memory.holder('a')).toBe(first.fencingToken);
    });

    it('renew: false: a lease with more time left than asked for is handed out as it is, with no call', async () => {
      const { client, clock, faulty } = harness();
      const first = await client.acquire('a', { ttlMs: 60_000, renew: false, reentrant: true });
      await clock.advance(1_000);
      const nested = await client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true });
      expect(nested).toBe(first);
      expect(faulty.counts.attempted.renew).toBe(0);
      expect(nested.ttlMs).toBe(60_000);
    });

    it('a longer TTL than the shared lease has: the lease is renewed with it, and keeps it', async () => {
      const { client, clock, memory } = harness();
      const first = await client.acquire('a', { ttlMs: 1_000, reentrant: true });
      const nested = await client.acquire('a', { ttlMs: 60_000, reentrant: true });
      expect(nested).toBe(first);
      expect(nested.ttlMs).toBe(60_000);
      expect((await memory.inspect('a')).expiresInMs).toBe(60_000);
      // A pause of 10 s is within what the nested caller asked to survive.
      clock.jump(10_000);
      expect(nested.isHeld()).toBe(true);
      await clock.advance(0);
      expect(nested.state).toBe('held');
      expect(memory.holder('a')).toBe(first.fencingToken);
      await clock.advance(30_000); // renewals go on with the longer TTL
      expect((await memory.inspect('a')).expiresInMs).toBeGreaterThan(30_000);
    });

    it('a renewal that cannot reach the service fails the nested acquire; the shared handle stays held', async () => {
      const { client, clock, faulty } = harness();
      const first = await client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true });
      await clock.advance(2_500);
      faulty.failNext(1);
      await expect(client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true })).rejects.toBeInstanceOf(
        TransportError,
      );
      expect(first.state).toBe('held');
      await first.release(); // one hold only: the failed nested acquire did not count
      expect(first.state).toBe('released');
    });

    it("a nested acquire retrying its renewal through an outage does not spend the shared handle's renewFailBudget", async () => {
      const { client, clock, faulty } = harness({ renewFailBudget: 3 });
      const first = await client.acquire('a', { ttlMs: 30_000, reentrant: true });
      faulty.partition('fail');
      const nested = outcome(client.acquire('a', { ttlMs: 60_000, reentrant: true, waitMs: 2_000 }));
      await clock.advanceUntil(() => nested.done, 3_000);
      expect(nested.error).toBeInstanceOf(TransportError);
      expect(faulty.counts.attempted.renew).toBeGreaterThanOrEqual(3);
      // 28 s of the holder's own window are left, and its own renewals have not failed once.
      expect(first.state).toBe('held');
      faulty.heal();
      await clock.advance(30_000);
      expect(first.isHeld()).toBe(true);
      await first.release();
    });

    it('a refused renewal loses the shared handle; the nested acquire takes the lock afresh', async () => {
      const onLost = vi.fn();
      const clock = new FakeClock();
      const memory = new MemoryLockService({ clock });
      let refuse = false;
      const service: LockService = {
        acquire: (request) => memory.acquire(request),
        renew: (request) => (refuse ? Promise.resolve({ renewed: false }) : memory.renew(request)),
        release: (lease) => memory.release(lease),
        watch: (name, onReleased) => memory.watch(name, onReleased),
      };
      const client = new LockClient(service, { clock });
      const first = await client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true, onLost });
      await clock.advance(2_500);
      refuse = true; // the service no longer counts this grant as the holder (deleted by hand, a failover)
      const nested = outcome(
        client.acquire('a', { ttlMs: TTL, renew: false, reentrant: true, waitMs: 1_000 }),
      );
      await clock.advance(0);
      expect(first.state).toBe('lost');
      // The service still keeps the grant it no longer renews until its TTL: then the lock is taken afresh.
      await clock.advanceUntil(() => nested.done, 1_000);
      expect(nested.value).toBeDefined();
      expect(onLost).toHaveBeenCalledTimes(1);
      expect(nested.value).not.toBe(first);
      expect(nested.value?.fencingToken).toBeGreaterThan(first.fencingToken);
      await client.close();
    });

    it('a renewal answered after a reentrant one raised the TTL does not cut the lease back or outlive it here', async () => {
      const clock = new FakeClock({ seed: 1 });
      const memory = new MemoryLockService({ clock });
      let holdReply: ((release: () => void) => void) | undefined;
      let heldReply: (() => void) | undefined;
      let down = false;
      const service: LockService = {
        acquire: (r) => memory.acquire(r),
        renew: async (r) => {
          if (down) throw new TransportError('down');
          const result = await memory.renew(r); // the service applies it now
          if (holdReply) {
            const hold = holdReply;
            holdReply = undefined;
            await new Promise<void>((resolve) => hold(resolve)); // its answer comes late
          }
          return result;
        },
        release: (l) => memory.release(l),
        watch: (n, cb) => memory.watch(n, cb),
      };
      const a = new LockClient(service, { clock });
      const first = await a.acquire('x', { ttlMs: 1_000, reentrant: true });
      holdReply = (release) => {
        heldReply = release;
      };
      await clock.advanceUntil(() => heldReply !== undefined, 1_000); // the scheduler's renew(1000) is out
      // It waits for the scheduler's renewal to be answered: one renewal per lease in flight.
      const pendingNested = outcome(a.acquire('x', { ttlMs: 60_000, reentrant: true }));
      await clock.advance(0);
      expect(pendingNested.done).toBe(false);
      heldReply?.();
      await clock.advanceUntil(() => pendingNested.done, 1_000);
      const nested = pendingNested.value;
      if (nested === undefined) throw new Error('the nested acquire failed');
      expect(nested).toBe(first);
      expect(nested.ttlMs).toBe(60_000);
      await clock.advance(1_000); // renewals go on
      const ttlAfter = nested.ttlMs;
      const serverLeft = (await memory.inspect('x')).expiresInMs;
      down = true; // the service cannot be reached from this client any more
      await clock.advance(5_000);
      const other = new LockClient(memory, { clock });
      const taken = await other.tryAcquire('x', { ttlMs: 1_000 });
      // Nobody else may hold the lock while this client says it does.
      expect({ heldHere: nested.isHeld(), takenElsewhere: taken !== null }).toEqual({
        heldHere: true,
        takenElsewhere: false,
      });
      expect(ttlAfter).toBe(60_000);
      expect(serverLeft).toBeGreaterThan(30_000);
      await other.close();
      await a.close().catch(() => {});
    });

    it('the window kept here is the one from the renewal the service applied last, whatever order answers come in', async () => {
      const clock = new FakeClock({ seed: 1 });
      const memory = new MemoryLockService({ clock });
      /** Renewals the service has received but neither applied nor answered: the test orders both. */
      const pending: { request: RenewRequest; apply: () => Promise<void>; answer: () => void }[] = [];
      let down = false;
      const service: LockService = {
        acquire: (r) => memory.acquire(r),
        renew: (request) => {
          if (down) return Promise.reject(new TransportError('down'));
          return new Promise<RenewResult>((resolve) => {
            let result: RenewResult = { renewed: false };
            pending.push({
              request,
              apply: async () => {
                result = await memory.renew(request);
              },
              answer: () => resolve(result),
            });
          });
        },
        release: (l) => memory.release(l),
        watch: (n, cb) => memory.watch(n, cb),
      };
      // Whatever is outstanding: the newest request is applied first, and the oldest answered first.
      const serve = async (): Promise<void> => {
        const batch = pending.splice(0);
        for (const p of [...batch].reverse()) await p.apply();
        for (const p of batch) {
          p.answer();
          await clock.advance(0);
        }
      };
      const a = new LockClient(service, { clock });
      const first = await a.acquire('x', { ttlMs: 1_000, reentrant: true });
      await clock.advanceUntil(() => pending.length === 1, 1_000); // the scheduler's renew(1000) is out
      const nested = outcome(a.acquire('x', { ttlMs: 60_000, reentrant: true }));
      await clock.advance(0);
      const ttlsAsked: number[] = [];
      for (let round = 0; round < 5 && !nested.done; round += 1) {
        ttlsAsked.push(...pending.map((p) => p.request.ttlMs));
        await serve();
        await clock.advance(0);
      }
      expect(nested.value).toBe(first);
      expect(ttlsAsked).toEqual([1_000, 60_000]);
      // The client may believe no more than the service's lease says.
      const serviceLeft = (await memory.inspect('x')).expiresInMs ?? 0;
      expect(first.expiresAt - clock.monotonic()).toBeLessThanOrEqual(serviceLeft);
      down = true; // the service cannot be reached from this client any more
      await clock.advance(5_000);
      const other = new LockClient(memory, { clock });
      const taken = await other.tryAcquire('x', { ttlMs: 1_000 });
      expect({ heldHere: first.isHeld(), takenElsewhere: taken !== null }).toEqual({
        heldHere: true,
        takenElsewhere: false,
      });
      await other.close();
      await a.close().catch(() => {});
    });

    it('a renewal that waits for the one in flight still settles within waitMs + operationTimeoutMs', async () => {
      const clock = new FakeClock({ seed: 1 });
      const memory = new MemoryLockService({ clock });
      let renewals = 0;
      const service: LockService = {
        acquire: (r) => memory.acquire(r),
        renew: () => {
          renewals += 1;
          return new Promise<RenewResult>(() => {}); // the service never answers a renewal
        },
        release: (l) => memory.release(l),
        watch: (n, cb) => memory.watch(n, cb),
      };
      const a = new LockClient(service, { clock, operationTimeoutMs: 5_000 });
      const first = await a.acquire('x', { ttlMs: 60_000, reentrant: true });
      await clock.advanceUntil(() => renewals === 1, 30_000); // the scheduler's renewal is out, and hangs
      await clock.advance(1_000);
      const startedAt = clock.monotonic();
      const nested = outcome(a.acquire('x', { ttlMs: 120_000, reentrant: true, waitMs: 0 }));
      await clock.advanceUntil(() => nested.done, 20_000);
      expect(nested.error).toBeInstanceOf(TransportError);
      expect(clock.monotonic() - startedAt).toBeLessThanOrEqual(5_000);
      expect(renewals).toBe(2); // its own went out after the first timed out, with what was left of the bound
      expect(first.isHeld()).toBe(true);
      await a.close().catch(() => {});
    });

    it('renew() while a renewal is in flight joins it: one request, and its answer', async () => {
      const clock = new FakeClock({ seed: 1 });
      const memory = new MemoryLockService({ clock });
      const answers: (() => void)[] = [];
      const service: LockService = {
        acquire: (r) => memory.acquire(r),
        renew: async (r) => {
          const result = await memory.renew(r);
          await new Promise<void>((resolve) => answers.push(resolve));
          return result;
        },
        release: (l) => memory.release(l),
        watch: (n, cb) => memory.watch(n, cb),
      };
      const a = new LockClient(service, { clock });
      const handle = await a.acquire('x', { ttlMs: 3_000 });
      await clock.advanceUntil(() => answers.length === 1, 3_000);
      const renewed = outcome(handle.renew());
      await clock.advance(0);
      expect(answers.length).toBe(1);
      answers.shift()?.();
      await clock.advance(0);
      expect(renewed.value).toBe(true);
      expect(answers.length).toBe(0);
      await a.close();
    });
  });
});
