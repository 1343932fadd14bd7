import { setMaxListeners } from 'node:events';
import type { CallDeadlines } from './bounded-call.js';
import type { Clock } from './clock.js';

/**
 * A one-slot wake-up for a waiting acquire. A notice that arrives while the waiter is not asleep (between an
 * attempt and the next sleep) is kept, so it cannot be lost (the lost-wake-up race of CURATOR-527).
 */
export class WakeSignal {
  #pending = false;
  #wakeSleeper: (() => void) | undefined;

  /** Wakes the waiter now, or its next `wait` at once if it is not asleep. */
  notify(): void {
    if (this.#wakeSleeper) this.#wakeSleeper();
    else this.#pending = true;
  }

  /**
   * Sleeps up to `ms`, returning early on a notice. Rejects with `signal.reason` if `signal` aborts.
   *
   * With `deadlines` the sleep is an entry on that shared timer instead of a sleep of its own: no timer and no
   * AbortController per wait, which is most of a queued waiter's CPU under contention. That timer is unref'd, and
   * `deadlines.stop(reason)` ends the wait with `reason`; use it where something else keeps the process alive while
   * the caller waits (the client's pending-call hold).
   */
  wait(clock: Clock, ms: number, signal: AbortSignal, deadlines?: CallDeadlines): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    return deadlines ? this.#onDeadlines(clock, ms, signal, deadlines) : this.#onClock(clock, ms, signal);
  }

  #onDeadlines(clock: Clock, ms: number, signal: AbortSignal, deadlines: CallDeadlines): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const finish = (settle: () => void): void => {
        this.#wakeSleeper = undefined;
        signal.removeEventListener('abort', onAbort);
        deadlines.delete(due);
        settle();
      };
      const onAbort = (): void => finish(() => reject(signal.reason));
      const due = deadlines.add(clock.monotonic() + Math.max(0, ms), (reason?: unknown) =>
        finish(() => (reason === undefined ? resolve() : reject(reason))),
      );
      this.#wakeSleeper = () => finish(resolve);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  async #onClock(clock: Clock, ms: number, signal: AbortSignal): Promise<void> {
    const sleeper = new AbortController();
    const onAbort = (): void => sleeper.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    this.#wakeSleeper = () => sleeper.abort(WOKEN);
    try {
      await clock.sleep(Math.max(0, ms), sleeper.signal);
    } catch (error) {
      if (error !== WOKEN) throw error;
    } finally {
      this.#wakeSleeper = undefined;
      signal.removeEventListener('abort', onAbort);
    }
  }
}

const WOKEN = Symbol('woken');

/** Settles like `promise`, or with `signal.reason` as soon as `signal` aborts (the promise itself runs on). */
export function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * A signal that aborts when either input does, and a `dispose` that detaches it again, so a long-lived signal
 * (the client's close signal) does not collect one listener per finished call. (`AbortSignal.any` needs Node 20.3.)
 */
export function linkSignals(
  a: AbortSignal | undefined,
  b: AbortSignal,
): {
  /** Aborts with the reason of whichever input aborts first. */
  readonly signal: AbortSignal;
  /** Detaches the listeners from both inputs; call it when the call the signal was for has ended. */
  dispose(): void;
} {
  if (!a) return { signal: b, dispose: () => {} };
  // One caller signal often guards many concurrent acquires (a shutdown signal), and `b` is usually a service's or
  // client's close signal that every call in flight links to: each adds a listener for its duration and removes it
  // after, so Node's leak warning at 11 listeners would be a false alarm (the bench saw it at 8+ queued waiters).
  setMaxListeners(0, a);
  setMaxListeners(0, b);
  const controller = new AbortController();
  const fromA = (): void => controller.abort(a.reason);
  const fromB = (): void => controller.abort(b.reason);
  if (a.aborted) fromA();
  else if (b.aborted) fromB();
  else {
    a.addEventListener('abort', fromA, { once: true });
    b.addEventListener('abort', fromB, { once: true });
  }
  return {
    signal: controller.signal,
    dispose: () => {
      a.removeEventListener('abort', fromA);
      b.removeEventListener('abort', fromB);
    },
  };
}
