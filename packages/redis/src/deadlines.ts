import { CallDeadlines, type Clock, systemClock, TransportError } from '@dlock/core';

/**
 * Bounds every Redis call the adapter makes. node-redis' own `timeout` only covers a command that has not been
 * written yet: a written command whose reply never comes (server paused, packets dropped) waits forever. The
 * deadlines share core's one-timer {@link CallDeadlines} (unref'd), so a call costs a set entry, not a timer.
 */
export class Deadlines {
  readonly #clock: Clock;
  readonly #deadlines: CallDeadlines;

  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
    this.#deadlines = new CallDeadlines(clock);
  }

  /**
   * Settles like `promise`, or rejects with a `TransportError` after `timeoutMs`. The late outcome is dropped
   * (never an unhandled rejection); the caller decides what an unknown outcome means.
   */
  bound<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const entry = this.#deadlines.add(this.#clock.monotonic() + timeoutMs, () => {
        if (settled) return;
        settled = true;
        reject(new TransportError(`${what} did not answer within ${Math.round(timeoutMs)} ms`));
      });
      promise.then(
        (value) => {
          this.#deadlines.delete(entry);
          if (settled) return;
          settled = true;
          resolve(value);
        },
        (error: unknown) => {
          this.#deadlines.delete(entry);
          if (settled) return;
          settled = true;
          reject(error);
        },
      );
    });
  }
}
