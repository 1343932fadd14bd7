import { TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { beforeEach, describe, expect, it } from 'vitest';
import { type CallState, Deadlines, WATCH_SIGNAL_AFTER_MS } from './deadlines.js';

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('Deadlines', () => {
  let clock: FakeClock;
  beforeEach(() => {
    clock = new FakeClock();
  });

  it('passes through a call that settles in time', async () => {
    const deadlines = new Deadlines(clock);
    const call = deferred<string>();
    const bounded = deadlines.bound(call.promise, 100, 'GET');
    call.resolve('ok');
    await expect(bounded).resolves.toBe('ok');
    const failing = deferred<string>();
    const boundedFail = deadlines.bound(failing.promise, 100, 'GET');
    failing.reject(new Error('boom'));
    await expect(boundedFail).rejects.toThrow('boom');
  });

  it('fails a call that never answers with a TransportError at its deadline, not before', async () => {
    const deadlines = new Deadlines(clock);
    const never = deferred<string>();
    let outcome: unknown;
    deadlines.bound(never.promise, 100, 'EVALSHA acquire').catch((error: unknown) => {
      outcome = error;
    });
    await clock.advance(99);
    expect(outcome).toBeUndefined();
    await clock.advance(2);
    expect(outcome).toBeInstanceOf(TransportError);
    expect(String(outcome)).toContain('EVALSHA acquire did not answer within 100 ms');
    // The late answer is dropped, not an unhandled rejection.
    never.reject(new Error('late'));
    await clock.advance(1);
  });

  it('serves many deadlines with one timer, each at its own time', async () => {
    const deadlines = new Deadlines(clock);
    const expired: number[] = [];
    for (const ms of [300, 100, 200, 100]) {
      deadlines.bound(deferred<void>().promise, ms, `call ${ms}`).catch(() => expired.push(ms));
    }
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(150);
    expect(expired).toEqual([100, 100]);
    await clock.advance(100);
    expect(expired).toEqual([100, 100, 200]);
    await clock.advance(100);
    expect(expired).toEqual([100, 100, 200, 300]);
    expect(clock.pendingTimers).toBe(0);
  });

  it('does not re-arm for calls that finish: a steady stream costs about one timer per bound', async () => {
    const deadlines = new Deadlines(clock);
    for (let i = 0; i < 1_000; i++) {
      const call = deferred<number>();
      const bounded = deadlines.bound(call.promise, 1_000, 'PING');
      call.resolve(i);
      await bounded;
    }
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(1_001);
    expect(clock.pendingTimers).toBe(0);
  });

  it("reads the caller's signal only once a call is slow, then gives up at once when it aborts", async () => {
    const deadlines = new Deadlines(clock);
    const caller = new AbortController();
    let reads = 0;
    const signal = (): AbortSignal => {
      reads += 1;
      return caller.signal;
    };
    const fast = deferred<string>();
    const state: CallState = { abandoned: false };
    const boundFast = deadlines.bound(fast.promise, 5_000, 'acquire', { signal, state });
    fast.resolve('ok');
    await expect(boundFast).resolves.toBe('ok');
    await clock.advance(WATCH_SIGNAL_AFTER_MS + 1);
    expect(reads).toBe(0);

    let outcome: unknown;
    deadlines
      .bound(deferred<string>().promise, 5_000, 'acquire', { signal, state })
      .catch((error: unknown) => {
        outcome = error;
      });
    await clock.advance(WATCH_SIGNAL_AFTER_MS + 1);
    expect(reads).toBe(1);
    expect(outcome).toBeUndefined();
    const reason = new Error('core gave up');
    caller.abort(reason);
    await clock.advance(0);
    expect(outcome).toBe(reason);
    expect(state.abandoned).toBe(true);
  });

  it('gives up at once on a slow call whose signal had already aborted', async () => {
    const deadlines = new Deadlines(clock);
    const reason = new Error('gone');
    const state: CallState = { abandoned: false };
    let outcome: unknown;
    deadlines
      .bound(deferred<string>().promise, 5_000, 'acquire', { signal: () => AbortSignal.abort(reason), state })
      .catch((error: unknown) => {
        outcome = error;
      });
    await clock.advance(WATCH_SIGNAL_AFTER_MS);
    expect(outcome).toBe(reason);
    expect(state.abandoned).toBe(true);
  });
});
