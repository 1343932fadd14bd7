import { InvalidArgumentError, TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import fc from 'fast-check';
import { createClient } from 'redis';
import { describe, expect, it } from 'vitest';
import { hashTagOf } from '../src/keys.js';
import { RedlockService, type RedlockServiceOptions } from '../src/redlock/index.js';
import { redlockKeys } from '../src/redlock/keys.js';
import { type Outcome, RoundDeadlines, runRound } from '../src/redlock/round.js';

// Unconnected clients: constructing a service sends nothing.
const fresh = () => createClient({ url: 'redis://127.0.0.1:1' });

describe('RedlockService options', () => {
  it('needs a majority of N: floor(N / 2) + 1', () => {
    const quorums = [1, 2, 3, 4, 5, 6, 7].map(
      (n) => new RedlockService({ clients: Array.from({ length: n }, fresh) }).quorum,
    );
    expect(quorums).toEqual([1, 2, 2, 3, 3, 4, 4]);
  });

  it('rejects bad options before any network call', () => {
    const client = fresh();
    const bad: unknown[] = [
      undefined,
      {},
      { clients: [] },
      { clients: [{}] },
      { clients: [client, client] }, // one node counted twice would fake a majority
      { clients: [fresh()], keyPrefix: 'a{b' },
      { clients: [fresh()], nodeTimeoutMs: 0 },
      { clients: [fresh()], nodeTimeoutMs: 1.5 },
      { clients: [fresh()], fenceRetentionMs: 10 },
    ];
    for (const options of bad) {
      expect(() => new RedlockService(options as RedlockServiceOptions)).toThrow(InvalidArgumentError);
    }
  });

  it('rejects bad requests without touching the nodes', async () => {
    const service = new RedlockService({ clients: [fresh()] });
    const signal = new AbortController().signal;
    await expect(service.acquire({ name: '', ownerId: 'x', ttlMs: 100, waitMs: 0, signal })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(service.acquire({ name: 'a', ownerId: 'x', ttlMs: 0.5, waitMs: 0, signal })).rejects.toThrow(
      InvalidArgumentError,
    );
    const lease = { name: 'a', ownerId: 'x', ownershipToken: '', fencingToken: 1n };
    await expect(service.release(lease)).rejects.toThrow(InvalidArgumentError);
    expect(() => service.watch('a', 'nope' as unknown as () => void)).toThrow(InvalidArgumentError);
  });
});

describe('Redlock keys', () => {
  it('maps distinct names to distinct keys that share one hash tag', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }),
        fc.string({ minLength: 1, maxLength: 40 }),
        (a, b) => {
          fc.pre(a !== b);
          const ka = redlockKeys('p:', a);
          const kb = redlockKeys('p:', b);
          expect(ka.lock).not.toBe(kb.lock);
          expect(ka.fence).not.toBe(kb.fence);
          expect(ka.released).not.toBe(kb.released);
          expect(hashTagOf(ka.fence)).toBe(hashTagOf(ka.lock));
          expect(hashTagOf(ka.released)).toBe(hashTagOf(ka.lock));
        },
      ),
    );
  });
});

describe('runRound', () => {
  const never = (): Promise<never> => new Promise(() => {});

  it('ends at its deadline with unanswered nodes pending, and aborts their signal', async () => {
    const clock = new FakeClock();
    const signals: AbortSignal[] = [];
    const round = runRound(
      3,
      (i, signal) => {
        signals.push(signal);
        return i === 0 ? Promise.resolve('a') : i === 1 ? Promise.reject(new Error('down')) : never();
      },
      { deadlines: new RoundDeadlines(clock, 100) },
    );
    let done = false;
    void round.then(() => {
      done = true;
    });
    await clock.advance(99);
    expect(done).toBe(false);
    await clock.advance(1);
    const outcomes: Outcome<string>[] = await round;
    expect(outcomes.map((o) => o.status)).toEqual(['ok', 'failed', 'pending']);
    expect(signals[2]?.aborted).toBe(true);
    expect(signals[2]?.reason).toBeInstanceOf(TransportError);
  });

  it('ends as soon as the decision cannot change, without waiting for a hung node', async () => {
    const clock = new FakeClock();
    const outcomes = await runRound(3, (i) => (i === 2 ? never() : Promise.resolve(i)), {
      deadlines: new RoundDeadlines(clock, 100),
      decided: (o) => o.filter((x) => x.status === 'ok').length >= 2,
    });
    expect(outcomes.map((o) => o.status)).toEqual(['ok', 'ok', 'pending']);
  });

  it('shares one timer between rounds and ends each at its own deadline', async () => {
    const clock = new FakeClock();
    const deadlines = new RoundDeadlines(clock, 100);
    const first = runRound(1, () => never(), { deadlines });
    await clock.advance(40);
    const second = runRound(2, (i) => (i === 0 ? Promise.resolve('quick') : never()), { deadlines });
    const third = runRound(1, () => Promise.resolve('done'), { deadlines }); // ends at once, never times out
    expect((await third)[0]?.status).toBe('ok');
    expect(clock.pendingTimers).toBe(1);
    let secondDone = false;
    void second.then(() => {
      secondDone = true;
    });
    await clock.advance(60);
    expect((await first)[0]?.status).toBe('pending');
    expect(secondDone).toBe(false);
    await clock.advance(40);
    expect((await second).map((o) => o.status)).toEqual(['ok', 'pending']);
    expect(clock.pendingTimers).toBe(0); // nothing left to bound: the timer is not re-armed
  });
});
