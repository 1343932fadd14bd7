import type { Clock } from '../clock.js';
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
  readonly #running = new Set<Promise<void>>();
  readonly #stop = new AbortController();

  constructor(clock: Clock, options: { readonly baseMs?: number; readonly capMs?: number } = {}) {
    this.#clock = clock;
    this.#baseMs = options.baseMs ?? 50;
    this.#capMs = options.capMs ?? 1_000;
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

  /** Stops retrying (a try in flight still finishes) and waits for every clean-up to settle. Idempotent. */
  async close(): Promise<void> {
    this.#stop.abort(STOPPED);
    await Promise.allSettled([...this.#running]);
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
