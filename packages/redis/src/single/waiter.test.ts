import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Waiter } from './waiter.js';

describe('Waiter', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('wakes on a delivered grant', async () => {
    const waiter = new Waiter();
    const woke = waiter.wait(10_000, new AbortController().signal);
    waiter.deliver({ kind: 'granted', fence: 7n });
    await expect(woke).resolves.toEqual({ kind: 'granted', fence: 7n });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('keeps a grant that arrives before it parks, and a recheck never overwrites it', async () => {
    const waiter = new Waiter();
    waiter.deliver({ kind: 'granted', fence: 9n });
    waiter.deliver({ kind: 'recheck' });
    await expect(waiter.wait(10_000, new AbortController().signal)).resolves.toEqual({
      kind: 'granted',
      fence: 9n,
    });
    // Consumed: the next wait runs to its timer.
    const next = waiter.wait(50, new AbortController().signal);
    await vi.advanceTimersByTimeAsync(50);
    await expect(next).resolves.toEqual({ kind: 'timer' });
  });

  it('wakes on its timer, and on abort (removing its timer and listener)', async () => {
    const waiter = new Waiter();
    const timed = waiter.wait(100, new AbortController().signal);
    await vi.advanceTimersByTimeAsync(99);
    waiter.deliver({ kind: 'recheck' });
    await expect(timed).resolves.toEqual({ kind: 'recheck' });

    const controller = new AbortController();
    const aborted = waiter.wait(100, controller.signal);
    controller.abort(new Error('caller gave up'));
    await expect(aborted).resolves.toEqual({ kind: 'aborted' });
    expect(vi.getTimerCount()).toBe(0);
    await expect(waiter.wait(100, controller.signal)).resolves.toEqual({ kind: 'aborted' });
  });
});
