import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { LockClient } from '../src/client.js';
import { ClientClosedError } from '../src/errors.js';
import { MemoryLockService } from '../src/memory/memory-lock-service.js';
import type { LockService } from '../src/service.js';
import { outcome } from './harness.js';

const TTL = 10_000;

/** A memory service whose answers take `delayMs` of the fake clock. */
function slowService(clock: FakeClock, delayMs: number): LockService {
  const memory = new MemoryLockService({ clock });
  const later = async <T>(answer: () => Promise<T>): Promise<T> => {
    await clock.sleep(delayMs);
    return answer();
  };
  return {
    acquire: (request) => later(() => memory.acquire(request)),
    renew: (request) => memory.renew(request),
    release: (lease) => later(() => memory.release(lease)),
    watch: (name, onReleased) => memory.watch(name, onReleased),
  };
}

describe('close() and the calls in flight', () => {
  it('waits for a release already under way, and settles an acquire in flight at once', async () => {
    const clock = new FakeClock();
    const client = new LockClient(slowService(clock, 100), { clock });
    const acquiring = outcome(client.acquire('a', { ttlMs: TTL }));
    await clock.advance(100);
    const handle = acquiring.value;
    if (!handle) throw new Error('not acquired');
    const releasing = outcome(handle.release());
    const acquiringB = outcome(client.tryAcquire('b', { ttlMs: TTL }));
    await clock.advance(10);
    const closing = outcome(client.close());
    await clock.advance(0);
    expect(acquiringB.error).toBeInstanceOf(ClientClosedError);
    expect(releasing.done).toBe(false);
    expect(closing.done).toBe(false);
    await clock.advance(89);
    expect(closing.done).toBe(false);
    await clock.advance(1);
    expect(releasing.done).toBe(true);
    expect(releasing.error).toBeUndefined();
    expect(closing.done).toBe(true);
  });

  it('a release begun after close() took its count is not waited for, and ends with ClientClosedError', async () => {
    const clock = new FakeClock();
    const client = new LockClient(slowService(clock, 100), { clock });
    const acquiring = outcome(client.acquire('a', { ttlMs: TTL, renew: false }));
    await clock.advance(100);
    const handle = acquiring.value;
    if (!handle) throw new Error('not acquired');
    const closing = outcome(client.close());
    // A lease granted for its TTL is left to run out by close(); its owner may still release it.
    const releasing = outcome(handle.release());
    await clock.advance(0);
    expect(closing.done).toBe(true);
    // Nothing bounds calls once the client closed: the release in flight ends with ClientClosedError, not never.
    expect(releasing.error).toBeInstanceOf(ClientClosedError);
  });
});

describe('close() from an acquired listener', () => {
  it('the acquire that was reporting its grant rejects with ClientClosedError, not a released handle', async () => {
    const clock = new FakeClock({ seed: 5 });
    const memory = new MemoryLockService({ clock });
    const client = new LockClient(memory, { clock });
    let closed: ReturnType<typeof outcome<void>> | undefined;
    client.events.on('acquired', () => {
      closed ??= outcome(client.close());
    });
    const acquiring = outcome(client.acquire('a', { ttlMs: TTL }));
    await clock.advance(0);
    expect(acquiring.error).toBeInstanceOf(ClientClosedError);
    expect(acquiring.value).toBeUndefined();
    expect(closed?.done).toBe(true);
    expect(memory.holder('a')).toBeUndefined();
    expect(clock.pendingTimers).toBe(0);
  });

  it('so does a reentrant acquire sharing a handle', async () => {
    const clock = new FakeClock({ seed: 5 });
    const memory = new MemoryLockService({ clock });
    const client = new LockClient(memory, { clock });
    const outer = await client.acquire('a', { ttlMs: TTL, reentrant: true });
    client.events.on('acquired', () => {
      void client.close();
    });
    const inner = outcome(client.acquire('a', { ttlMs: TTL, reentrant: true }));
    await clock.advance(0);
    expect(inner.error).toBeInstanceOf(ClientClosedError);
    expect(outer.state).toBe('released');
    expect(memory.holder('a')).toBeUndefined();
  });
});
