import { setMaxListeners } from 'node:events';
import type { Clock } from './clock.js';

/**
 * A one-slot wake-up for a waiting acquire. A notice that arrives while the waiter is not asleep (between an
 * attempt and the next sleep) is kept, so it cannot be lost (the lost-wake-up race of CURATOR-527).
 */
export class WakeSignal {
  #pending = false;
  #wakeSleeper: (() => void) | undefined;

  notify(): void {
    if (this.#wakeSleeper) this.#wakeSleeper();
    else this.#pending = true;
  }

  /** Sleeps up to `ms`, returning early on a notice. Rejects with `signal.reason` if `signal` aborts. */
  async wait(clock: Clock, ms: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw signal.reason;
    if (this.#pending) {
      this.#pending = false;
      return;
    }
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

/**
 * A signal that aborts when either input does, and a `dispose` that detaches it again, so a long-lived signal
 * (the client's close signal) does not collect one listener per finished call. (`AbortSignal.any` needs Node 20.3.)
 */
export function linkSignals(
  a: AbortSignal | undefined,
  b: AbortSignal,
): { readonly signal: AbortSignal; dispose(): void } {
  if (!a) return { signal: b, dispose: () => {} };
  // One caller signal often guards many concurrent acquires (a shutdown signal): each adds a listener for its
  // duration and removes it after, so Node's leak warning at 11 listeners would be a false alarm.
  setMaxListeners(0, a);
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
