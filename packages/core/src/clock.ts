import { performance } from 'node:perf_hooks';

/** Options for {@link Clock.sleep}. */
export interface SleepOptions {
  /**
   * Let the process exit while this sleep is pending. Background work (renewal, expiry) sleeps unref'd so an idle
   * client never keeps the process alive; a caller's own `acquire` wait does not, so its promise always settles.
   */
  readonly unref?: boolean;
}

/**
 * All time the library uses comes through a Clock, so tests can drive it (see `FakeClock` in `@dlock/testing`).
 * Deadlines and validity use `monotonic()` only: a wall-clock step must never lengthen or shorten a lease.
 */
export interface Clock {
  /** Wall-clock milliseconds since the epoch. Only for timestamps shown to people, never for deadlines. */
  now(): number;
  /** Milliseconds on a clock that never goes backwards and ignores wall-clock steps. */
  monotonic(): number;
  /** Resolves after `ms`; rejects with `signal.reason` as soon as `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal, options?: SleepOptions): Promise<void>;
  /** A number in [0, 1), for jitter. */
  random(): number;
}

/** The longest delay `setTimeout` honours (2^31 − 1 ms); a longer one fires after 1 ms. */
const LONGEST_TIMER_MS = 2_147_483_647;

/** The process's clocks: `Date.now()`, `performance.now()`, `setTimeout`, `Math.random()`. */
export const systemClock: Clock = Object.freeze({
  now: () => Date.now(),
  monotonic: () => performance.now(),
  random: () => Math.random(),
  sleep(ms: number, signal?: AbortSignal, options?: SleepOptions): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      // Whole milliseconds: Node keeps one timer list per distinct duration, so fractional durations (as computed
      // deadlines are) would each cost a new list. Longer than a timer can run (a deadline of "wait forever" plus
      // a bound), Node would fire after 1 ms: sleep in steps instead.
      let left = Math.max(0, Math.ceil(ms));
      let timer: ReturnType<typeof setTimeout>;
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      const step = (): void => {
        const now = Math.min(left, LONGEST_TIMER_MS);
        left -= now;
        timer = setTimeout(() => {
          if (left > 0) {
            step();
            return;
          }
          signal?.removeEventListener('abort', onAbort);
          resolve();
        }, now);
        if (options?.unref) timer.unref();
      };
      step();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
});
