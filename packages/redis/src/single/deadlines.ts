import { CallDeadlines, type Clock, systemClock, TransportError } from '@dlock/core';

/**
 * A call still unanswered this long (ms) starts listening to its caller's abort signal. Reading core's request
 * signal makes an AbortController and a listener, about 10 µs, a real share of a fast acquire; a call that is this
 * slow can afford it, and an abort is then seen at most this much late.
 */
export const WATCH_SIGNAL_AFTER_MS = 20;

/** Set once the bound gave up on a call: the call must send nothing more (no script re-sent after NOSCRIPT). */
export interface CallState {
  abandoned: boolean;
}

export interface BoundOptions {
  /**
   * The caller's abort signal, read only once the call is slow (see {@link WATCH_SIGNAL_AFTER_MS}). When it aborts,
   * the call rejects at once with its reason, so the caller can start undoing what the call may have done.
   */
  readonly signal?: () => AbortSignal;
  readonly state?: CallState;
}

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
   * Settles like `promise`, or rejects with a `TransportError` after `timeoutMs`, or with the signal's reason when
   * it aborts. The late outcome is dropped (never an unhandled rejection); the caller decides what an unknown
   * outcome means.
   */
  bound<T>(promise: Promise<T>, timeoutMs: number, what: string, options?: BoundOptions): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const startedAt = this.#clock.monotonic();
      let settled = false;
      let watched: AbortSignal | undefined;
      const onAbort = (): void => giveUp(watched?.reason);
      const giveUp = (reason: unknown): void => {
        if (settled) return;
        settled = true;
        if (options?.state) options.state.abandoned = true;
        this.#deadlines.delete(entry);
        watched?.removeEventListener('abort', onAbort);
        reject(reason);
      };
      const expire = (): void =>
        giveUp(new TransportError(`${what} did not answer within ${Math.round(timeoutMs)} ms`));
      const signalOf = options?.signal;
      let entry =
        signalOf === undefined || timeoutMs <= WATCH_SIGNAL_AFTER_MS
          ? this.#deadlines.add(startedAt + timeoutMs, expire)
          : this.#deadlines.add(startedAt + WATCH_SIGNAL_AFTER_MS, () => {
              if (settled) return;
              const signal = signalOf();
              if (signal.aborted) {
                giveUp(signal.reason);
                return;
              }
              watched = signal;
              signal.addEventListener('abort', onAbort, { once: true });
              entry = this.#deadlines.add(startedAt + timeoutMs, expire);
            });
      const finish = (settle: () => void): void => {
        if (settled) return;
        settled = true;
        this.#deadlines.delete(entry);
        watched?.removeEventListener('abort', onAbort);
        settle();
      };
      promise.then(
        (value) => finish(() => resolve(value)),
        (error: unknown) => finish(() => reject(error)),
      );
    });
  }
}
