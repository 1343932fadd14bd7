import type { Clock } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import { MAX_TIMER_MS } from '../options.js';
import { fullJitterBackoff } from '../timing.js';

const STOPPED = Symbol('stopped');

/**
 * Clean-ups that must land even though the call that needed them has already failed: removing the queue entry of
 * an abandoned acquire, deleting a claim whose write's outcome was lost. Each runs at once, then again with
 * jittered backoff while it keeps failing, until it succeeds, its horizon passes (after that it can no longer
 * matter: the lease it undoes has run out) or the owner closes. Sleeps are unref'd: clean-ups never keep a process
 * alive.
 */
export class BackgroundRetries {
  readonly #clock: Clock;
  readonly #baseMs: number;
  readonly #capMs: number;
  readonly #closeWaitMs: number;
  readonly #running = new Set<Promise<void>>();
  readonly #stop = new AbortController();

  /**
   * `closeWaitMs` (default 5,000 ms, as core's default `operationTimeoutMs`; from 0 to 2^31 − 1): how long `close()`
   * waits for tries still in flight.
   */
  constructor(
    clock: Clock,
    options: { readonly baseMs?: number; readonly capMs?: number; readonly closeWaitMs?: number } = {},
  ) {
    this.#clock = clock;
    this.#baseMs = options.baseMs ?? 50;
    this.#capMs = options.capMs ?? 1_000;
    const closeWaitMs = options.closeWaitMs ?? 5_000;
    if (typeof closeWaitMs !== 'number' || !(closeWaitMs >= 0 && closeWaitMs <= MAX_TIMER_MS)) {
      throw new InvalidArgumentError('options.closeWaitMs', `must be a number from 0 to ${MAX_TIMER_MS}`);
    }
    this.#closeWaitMs = closeWaitMs;
  }

  /** Number of clean-ups not yet settled. */
  get pending(): number {
    return this.#running.size;
  }

  /** Runs `task` now and retries it until it resolves or `untilMs` (on the clock's monotonic time) passes. */
  run(task: () => Promise<unknown>, untilMs: number): void {
    if (this.#stop.signal.aborted) return;
    const running = this.#retry(task, untilMs);
    this.#running.add(running);
    void running.finally(() => this.#running.delete(running));
  }

  /**
   * Stops retrying and waits for the tries in flight to settle, at most `closeWaitMs`: a driver call that never
   * answers must not hold its service's close() for ever. A try still out then is left to land or not on its own
   * (nothing retries it). Idempotent.
   */
  async close(): Promise<void> {
    this.#stop.abort(STOPPED);
    if (this.#running.size === 0) return;
    const waited = new AbortController();
    try {
      await Promise.race([
        Promise.allSettled([...this.#running]),
        this.#clock.sleep(this.#closeWaitMs, waited.signal, { unref: true }),
      ]);
    } finally {
      waited.abort();
    }
  }

  async #retry(task: () => Promise<unknown>, untilMs: number): Promise<void> {
    const clock = this.#clock;
    for (let attempt = 0; ; attempt++) {
      try {
        await task();
        return;
      } catch {
        const delay = fullJitterBackoff(attempt, this.#baseMs, this.#capMs, () => clock.random());
        if (this.#stop.signal.aborted || clock.monotonic() + delay >= untilMs) return;
        try {
          await clock.sleep(delay, this.#stop.signal, { unref: true });
        } catch {
          return;
        }
      }
    }
  }
}
