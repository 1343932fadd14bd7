import { systemClock } from '@dlock/core';
import { afterEach, describe, expect, it, vi } from 'vitest';

afterEach(() => {
  vi.useRealTimers();
});

describe('systemClock.sleep', () => {
  it('sleeps longer than one timer can run in steps, instead of firing after 1 ms', async () => {
    vi.useFakeTimers();
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const longest = 2 ** 31 - 1;
    let done = false;
    const slept = systemClock.sleep(longest + 5_000).then(() => {
      done = true;
    });
    // Node would run a longer delay after 1 ms (TimeoutOverflowWarning): every timer asked for fits.
    expect(spy.mock.calls.every(([, ms]) => typeof ms === 'number' && ms <= longest)).toBe(true);
    await vi.advanceTimersByTimeAsync(longest);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(5_000);
    await slept;
    expect(done).toBe(true);
    expect(spy.mock.calls.map(([, ms]) => ms)).toEqual([longest, 5_000]);
  });

  it('an abort during a later step still rejects with the reason', async () => {
    vi.useFakeTimers();
    const controller = new AbortController();
    const slept = systemClock.sleep(2 ** 31 + 10, controller.signal);
    await vi.advanceTimersByTimeAsync(2 ** 31 - 1);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(slept).rejects.toBe(reason);
  });
});
