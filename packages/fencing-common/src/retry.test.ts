import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  FenceBusyError,
  FenceConflictError,
  InvalidArgumentError,
  StaleFencingTokenError,
} from './errors.js';
import { withFenceRetry } from './retry.js';

const fast = { baseDelayMs: 0, maxDelayMs: 0 };

describe('withFenceRetry', () => {
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });

  it('retries conflicts and busy waits until an attempt succeeds', async () => {
    const seen: number[] = [];
    const result = await withFenceRetry(async (n) => {
      seen.push(n);
      if (n === 1) throw new FenceConflictError('r', new Error('40001'));
      if (n === 2) throw new FenceBusyError('r', new Error('55P03'));
      return 'done';
    }, fast);
    expect(result).toBe('done');
    expect(seen).toEqual([1, 2, 3]);
  });

  it('gives up after maxAttempts with the last error', async () => {
    let calls = 0;
    const error = await withFenceRetry(
      async () => {
        calls++;
        throw new FenceConflictError('r', new Error(`attempt ${calls}`));
      },
      { ...fast, maxAttempts: 3 },
    ).catch((e: unknown) => e);
    expect(calls).toBe(3);
    expect(error).toBeInstanceOf(FenceConflictError);
    expect((error as FenceConflictError).cause).toMatchObject({ message: 'attempt 3' });
  });

  it('never retries a stale token or a plain error', async () => {
    for (const thrown of [new StaleFencingTokenError('r', 1n, 2n), new Error('boom')]) {
      let calls = 0;
      const error = await withFenceRetry(async () => {
        calls++;
        throw thrown;
      }, fast).catch((e: unknown) => e);
      expect(error).toBe(thrown);
      expect(calls).toBe(1);
    }
  });

  it('stops retrying once the signal is aborted', async () => {
    const controller = new AbortController();
    let calls = 0;
    const error = await withFenceRetry(
      async () => {
        calls++;
        controller.abort();
        throw new FenceBusyError('r', undefined);
      },
      { maxAttempts: 10, signal: controller.signal },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FenceBusyError);
    expect(calls).toBe(1);
  });

  it('refuses a signal that is not an AbortSignal before the first attempt', async () => {
    // A plain object used to pass until the first backoff: listening on it threw in the promise, and the timer
    // already set then threw again when it fired, an uncaught exception that ended the process.
    let calls = 0;
    const attempt = async () => {
      calls++;
      throw new FenceConflictError('r', undefined);
    };
    for (const signal of [{}, { aborted: false }, 'abort', null, new AbortController()]) {
      const error = await withFenceRetry(attempt, { ...fast, signal: signal as never }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.signal' });
    }
    expect(calls).toBe(0);
    // Let a timer a failed backoff might have left behind fire inside this test.
    await new Promise((resolve) => setTimeout(resolve, 5));
  });

  it('rejects nonsensical bounds', async () => {
    await expect(withFenceRetry(async () => 1, { maxAttempts: 0 })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(withFenceRetry(async () => 1, { baseDelayMs: -1 })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
  });

  it('refuses a delay a timer cannot hold, or a bound that is not a number, naming the option and its range', async () => {
    // Node fires a timer set above 2^31-1 ms after 1 ms (with a TimeoutOverflowWarning), so an Infinity or a
    // 30-day backoff used to become a busy retry loop instead of the wait the caller asked for.
    let calls = 0;
    const attempt = async () => {
      calls++;
      throw new FenceConflictError('r', undefined);
    };
    const bad: [object, string, string][] = [
      [{ maxDelayMs: Number.POSITIVE_INFINITY }, 'options.maxDelayMs', '0..2147483647'],
      [{ maxDelayMs: 2 ** 31 }, 'options.maxDelayMs', '0..2147483647'],
      [{ baseDelayMs: Number.POSITIVE_INFINITY }, 'options.baseDelayMs', '0..2147483647'],
      [{ baseDelayMs: 2 ** 31, maxDelayMs: 2 ** 31 }, 'options.baseDelayMs', '0..2147483647'],
      [{ maxDelayMs: Number.NaN }, 'options.maxDelayMs', '0..2147483647'],
      [{ maxDelayMs: -1 }, 'options.maxDelayMs', '0..2147483647'],
      [{ maxDelayMs: '250' }, 'options.maxDelayMs', '0..2147483647'],
      [{ baseDelayMs: 10n }, 'options.baseDelayMs', '0..2147483647'],
      [{ maxAttempts: Number.POSITIVE_INFINITY }, 'options.maxAttempts', 'positive integer'],
      [{ maxAttempts: Number.NaN }, 'options.maxAttempts', 'positive integer'],
      [{ maxAttempts: 2.5 }, 'options.maxAttempts', 'positive integer'],
      [{ maxAttempts: -3 }, 'options.maxAttempts', 'positive integer'],
      [{ maxAttempts: '3' }, 'options.maxAttempts', 'positive integer'],
    ];
    for (const [options, field, range] of bad) {
      const error = await withFenceRetry(attempt, options as never).catch((e: unknown) => e);
      const shown = Object.entries(options).map(([key, value]) => `${key}: ${String(value)}`);
      expect(error, shown.join(', ')).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field });
      expect((error as Error).message).toContain(range);
    }
    expect(calls).toBe(0);
    // The largest delay a timer holds, and fractions, are fine.
    const edge = { maxAttempts: 1, baseDelayMs: 0.5, maxDelayMs: 2 ** 31 - 1 };
    await expect(withFenceRetry(attempt, edge)).rejects.toBeInstanceOf(FenceConflictError);
    expect(calls).toBe(1);
  });

  it('waits a finite, bounded time between attempts however many attempts are allowed', async () => {
    // With baseDelayMs 0, 0 * 2^1024 is NaN once past the 1025th attempt; a NaN timer is not the 0 ms asked for.
    vi.useFakeTimers();
    const timers = vi.spyOn(globalThis, 'setTimeout');
    let calls = 0;
    const done = withFenceRetry(
      async () => {
        calls++;
        throw new FenceBusyError('r', undefined);
      },
      { maxAttempts: 1100, baseDelayMs: 0, maxDelayMs: 0 },
    ).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(await done).toBeInstanceOf(FenceBusyError);
    expect(calls).toBe(1100);
    const delays = timers.mock.calls.map((call) => call[1]);
    expect(delays).toHaveLength(1099);
    expect(delays.filter((ms) => ms !== 0)).toEqual([]);
  });

  it('a signal whose listener methods throw ends no process and no wait early; the attempt error is rethrown', async () => {
    // A signal-like object passes the duck-typed check. Its removeEventListener used to throw inside the backoff's
    // timer callback, an uncaught exception; an addEventListener that threw replaced the attempt's error.
    const fail = () => {
      throw new Error('polyfill');
    };
    const signals = [
      { aborted: false, addEventListener: () => undefined, removeEventListener: fail },
      { aborted: false, addEventListener: fail, removeEventListener: () => undefined },
    ];
    for (const signal of signals) {
      vi.useFakeTimers();
      let calls = 0;
      const done = withFenceRetry(
        async () => {
          calls++;
          throw new FenceBusyError('r', undefined);
        },
        { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 5, signal: signal as never },
      ).catch((e: unknown) => e);
      await vi.runAllTimersAsync();
      expect(await done).toBeInstanceOf(FenceBusyError);
      expect(calls).toBe(3);
      vi.useRealTimers();
    }
  });

  it('rethrows what an attempt threw, even a value that cannot be read', async () => {
    // Reading the brand of a revoked Proxy threw a TypeError, which replaced what the attempt threw.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    let calls = 0;
    // Boxed: resolving a promise with the proxy itself would read its `then`.
    const [error] = await withFenceRetry(async () => {
      calls++;
      throw proxy;
    }, fast).then(
      () => [undefined],
      (e: unknown) => [e],
    );
    expect(error === proxy).toBe(true);
    expect(calls).toBe(1);
  });

  it('refuses a misspelt option before the first attempt, naming the key meant', async () => {
    let calls = 0;
    const attempt = async () => {
      calls++;
      return 'ran';
    };
    const misspelt: [object, string, string][] = [
      [{ maxAttempt: 1 }, 'options.maxAttempt', 'maxAttempts'],
      [{ maxDelayMS: 0 }, 'options.maxDelayMS', 'maxDelayMs'],
      [{ abortSignal: new AbortController().signal }, 'options.abortSignal', 'signal'],
    ];
    for (const [options, field, meant] of misspelt) {
      const error = await withFenceRetry(attempt, options as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field });
      expect((error as Error).message).toContain(`did you mean "${meant}"?`);
    }
    await expect(withFenceRetry(attempt, null as never)).rejects.toMatchObject({ field: 'options' });
    expect(calls).toBe(0);
    expect(await withFenceRetry(attempt, { maxAttempts: 1, baseDelayMs: 0, maxDelayMs: 0 })).toBe('ran');
  });
});
