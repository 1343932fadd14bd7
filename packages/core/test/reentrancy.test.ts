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
});
