import {
  AcquireTimeoutError,
  ClientClosedError,
  LockClient,
  type LockEventMap,
  LockLostError,
  MemoryLockService,
  TransportError,
} from '@dlock/core';
import { FakeClock, FaultyLockService } from '@dlock/testing';
import { describe, expect, it, vi } from 'vitest';
import { outcome } from './harness.js';

const TTL = 3_000;

function setup() {
  const clock = new FakeClock({ seed: 7 });
  const memory = new MemoryLockService({ clock });
  const faulty = new FaultyLockService(memory, { clock });
  const client = new LockClient(faulty, { clock, operationTimeoutMs: 1_000 });
  const other = new LockClient(memory, { clock });
  const failed: LockEventMap['acquire-failed'][] = [];
  const released: LockEventMap['released'][] = [];
  client.events.on('acquire-failed', (e) => failed.push(e));
  client.events.on('released', (e) => released.push(e));
  return { clock, memory, faulty, client, other, failed, released };
}

describe('acquire-failed', () => {
  it('a budget that runs out: outcome timeout, the reason, the wait and the attempts', async () => {
    const { clock, client, other, failed } = setup();
    await other.acquire('a', { ttlMs: TTL });
    const started = clock.monotonic();
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 500 }));
    await clock.advance(500);
    expect(call.error).toBeInstanceOf(AcquireTimeoutError);
    expect(failed).toHaveLength(1);
    const event = failed[0];
    expect(event).toMatchObject({
      name: 'a',
      kind: 'lock',
      outcome: 'timeout',
      reason: 'held-by-another-owner',
      waitedMs: 500,
      at: started + 500,
    });
    expect(event?.attempts).toBeGreaterThan(1);
    expect(event?.error).toBe(call.error);
  });

  it('tryAcquire on a busy lock: a timeout after one attempt, with no error', async () => {
    const { client, other, failed } = setup();
    await other.acquire('a', { ttlMs: TTL });
    expect(await client.tryAcquire('a', { ttlMs: TTL })).toBeNull();
    expect(failed).toEqual([
      {
        name: 'a',
        at: expect.any(Number),
        kind: 'lock',
        waitedMs: 0,
        attempts: 1,
        outcome: 'timeout',
        reason: 'held-by-another-owner',
      },
    ]);
  });

  it("the caller's signal: outcome aborted, with the signal's reason", async () => {
    const { clock, client, other, failed } = setup();
    await other.acquire('a', { ttlMs: TTL });
    const controller = new AbortController();
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000, signal: controller.signal }));
    await clock.advance(200);
    const reason = new Error('user gave up');
    controller.abort(reason);
    await clock.advance(0);
    expect(call.error).toBe(reason);
    expect(failed).toMatchObject([{ name: 'a', outcome: 'aborted', waitedMs: 200, error: reason }]);
  });

  it('close() during the wait: outcome closed', async () => {
    const { clock, client, other, failed } = setup();
    await other.acquire('a', { ttlMs: TTL });
    const call = outcome(client.acquire('a', { ttlMs: TTL, waitMs: 5_000 }));
    await clock.advance(100);
    await client.close();
    await clock.advance(0);
    expect(call.error).toBeInstanceOf(ClientClosedError);
    expect(failed).toMatchObject([{ outcome: 'closed', waitedMs: 100 }]);
  });

  it('a service that cannot be reached: outcome error, with the TransportError', async () => {
    const { client, faulty, failed } = setup();
    faulty.partition('fail');
    const call = outcome(client.acquire('a', { ttlMs: TTL }));
    await vi.waitFor(() => expect(call.done).toBe(true));
    expect(call.error).toBeInstanceOf(TransportError);
    expect(failed).toMatchObject([{ outcome: 'error', attempts: 1, error: call.error }]);
    expect(failed[0]).not.toHaveProperty('reason');
  });

  it('a permit: kind permit, reason no-free-permit; acquired and released carry the kind and the slot', async () => {
    const { clock, client, other, failed, released } = setup();
    const acquired: LockEventMap['acquired'][] = [];
    client.events.on('acquired', (e) => acquired.push(e));
    await other.semaphore('pool', { permits: 2, ttlMs: TTL }).acquire();
    const pool = client.semaphore('pool', { permits: 2, ttlMs: TTL });
    const permit = await pool.acquire();
    expect(acquired).toMatchObject([{ name: 'pool', kind: 'permit', slot: permit.slot }]);
    const call = outcome(pool.acquire({ waitMs: 300 }));
    await clock.advance(300);
    expect(call.error).toBeInstanceOf(AcquireTimeoutError);
    expect(failed).toMatchObject([
      { name: 'pool', kind: 'permit', outcome: 'timeout', reason: 'no-free-permit' },
    ]);
    await permit.release();
    expect(released).toMatchObject([{ name: 'pool', kind: 'permit', slot: permit.slot, result: 'deleted' }]);
  });

  it('nothing is emitted for a call that gets its handle', async () => {
    const { client, failed } = setup();
    await client.acquire('a', { ttlMs: TTL });
    expect(await client.tryAcquire('b', { ttlMs: TTL })).not.toBeNull();
    expect(failed).toEqual([]);
  });
});

describe('released', () => {
  it('after the service answered: the hold up to release(), the call itself, result deleted', async () => {
    const { clock, client, faulty, released } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    await clock.advance(700);
    faulty.latency(40);
    const call = outcome(handle.release());
    expect(released).toEqual([]);
    await clock.advance(40);
    expect(call.done).toBe(true);
    expect(released).toEqual([
      {
        name: 'a',
        fencingToken: handle.fencingToken,
        at: clock.monotonic(),
        kind: 'lock',
        heldMs: 700,
        releaseMs: 40,
        result: 'deleted',
      },
    ]);
  });

  it('a release the service could not hear of: result failed, with the error', async () => {
    const { client, faulty, released } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    faulty.failNext(1);
    await expect(handle.release()).rejects.toBeInstanceOf(TransportError);
    expect(released).toMatchObject([{ result: 'failed', error: expect.any(TransportError) }]);
  });

  it('a grant the service no longer had: result not-found, and release() rejects with the loss', async () => {
    const { client, memory, released } = setup();
    const handle = await client.acquire('a', { ttlMs: TTL });
    vi.spyOn(memory, 'release').mockResolvedValueOnce(false);
    await expect(handle.release()).rejects.toBeInstanceOf(LockLostError);
    expect(released).toMatchObject([{ result: 'not-found', kind: 'lock' }]);
  });
});

describe('kind on the other handle events', () => {
  it('renewed, renew-failed and lost say lock or permit', async () => {
    const { clock, client, faulty } = setup();
    const seen: { type: string; kind: string; slot?: number }[] = [];
    for (const type of ['renewed', 'renew-failed', 'lost'] as const) {
      client.events.on(type, (e) =>
        seen.push({ type, kind: e.kind, ...(e.slot === undefined ? {} : { slot: e.slot }) }),
      );
    }
    await client.acquire('a', { ttlMs: TTL });
    const permit = await client.semaphore('pool', { permits: 2, ttlMs: TTL }).acquire();
    await clock.advance(TTL / 2);
    expect(seen).toContainEqual({ type: 'renewed', kind: 'lock' });
    expect(seen).toContainEqual({ type: 'renewed', kind: 'permit', slot: permit.slot });
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(seen).toContainEqual({ type: 'renew-failed', kind: 'lock' });
    expect(seen).toContainEqual({ type: 'lost', kind: 'lock' });
    expect(seen).toContainEqual({ type: 'lost', kind: 'permit', slot: permit.slot });
  });

  it('lost carries how long the handle was held, to when the loss was noticed', async () => {
    const { clock, client, faulty } = setup();
    const lost: LockEventMap['lost'][] = [];
    client.events.on('lost', (e) => lost.push(e));
    await clock.advance(50);
    const handle = await client.acquire('a', { ttlMs: TTL });
    const acquiredAt = clock.monotonic();
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(handle.state).toBe('lost');
    expect(lost).toHaveLength(1);
    expect(lost[0]?.heldMs).toBe((lost[0]?.at ?? 0) - acquiredAt);
    expect(lost[0]?.heldMs).toBeGreaterThan(0);
  });
});

describe('a listener that throws what String() cannot convert', () => {
  // `Object.create(null)` has no toString: the warning's text must not be what fails the lock operation.
  const unprintable = (): never => {
    throw Object.create(null);
  };

  it('a granted acquire still returns its handle', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const clock = new FakeClock({ seed: 7 });
      const client = new LockClient(new MemoryLockService({ clock }), { clock });
      client.events.on('acquired', unprintable);
      const handle = await client.acquire('a', { ttlMs: TTL });
      expect(handle.isHeld()).toBe(true);
      expect(String(warn.mock.calls[0]?.[0])).toMatch(
        /acquired listener for lock "a" threw: a value String\(\)/,
      );
      await client.close();
    } finally {
      warn.mockRestore();
    }
  });

  it('a loss still reaches onLost, and nothing is left unhandled', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const { clock, faulty, client } = setup();
      client.events.on('lost', unprintable);
      const onLost = vi.fn();
      const handle = await client.acquire('a', { ttlMs: TTL, onLost });
      faulty.partition('fail');
      await clock.advance(2 * TTL);
      expect(handle.isHeld()).toBe(false);
      expect(onLost).toHaveBeenCalledTimes(1);
      await client.close();
    } finally {
      warn.mockRestore();
    }
  });
});

describe('a callback that returns a rejected promise', () => {
  // An `async` callback type-checks where one returning nothing is expected; its rejection must not go unhandled
  // (Node ends the process on an unhandled rejection by default).
  it('onLost, onRelease, an election onLost and an event listener: each a callback-error, none unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', onUnhandled);
    try {
      const { clock, memory, client } = setup();
      const errors: LockEventMap['callback-error'][] = [];
      client.events.on('callback-error', (e) => errors.push(e));
      client.events.on('lost', async () => {
        throw new Error('from a lost listener');
      });
      const unwatch = client.onRelease('a', async () => {
        throw new Error('from onRelease');
      });
      const handle = await client.acquire('a', {
        ttlMs: TTL,
        onLost: async () => {
          throw new Error('from onLost');
        },
      });
      const leadership = await client.election('e', { ttlMs: TTL }).campaign({
        onLost: async () => {
          throw new Error('from an election onLost');
        },
      });
      clock.jump(TTL); // a pause past both leases
      await clock.advance(TTL);
      expect(handle.state).toBe('lost');
      expect(leadership.state).toBe('lost');
      const other = await new LockClient(memory, { clock }).acquire('a', { ttlMs: TTL });
      await other.release(); // the release notice reaches the onRelease callback
      // Let Node look for unhandled rejections: it does so once the microtask queue is empty.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      // The lost listener runs for both losses; onRelease for every release notice (the lost lease's delete too).
      expect([...new Set(errors.map((e) => (e.error as Error).message))].sort()).toEqual([
        'from a lost listener',
        'from an election onLost',
        'from onLost',
        'from onRelease',
      ]);
      expect(errors.find((e) => (e.error as Error).message === 'from onRelease')?.source).toBe(
        'onRelease callback',
      );
      unwatch();
      await client.close();
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
