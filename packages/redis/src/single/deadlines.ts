import { type Clock, systemClock } from '@dlock/core';
import { boundedCall, CallDeadlines } from '@dlock/core/adapter';

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
 * Bounds every Redis call of the single-node service with core's {@link boundedCall} on one shared, unref'd
 * {@link CallDeadlines} timer (node-redis' own `timeout` only covers a command not yet written: a written command
 * whose reply never comes waits forever). What it adds to core's: the caller's signal is read lazily (see
 * {@link WATCH_SIGNAL_AFTER_MS}), and `state` tells the call that it was given up.
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
    const signalOf = options?.signal;
    const state = options?.state;
    const watch = signalOf !== undefined && timeoutMs > WATCH_SIGNAL_AFTER_MS;
    const cancels = watch ? new Set<(reason: unknown) => void>() : undefined;
    const call = (): Promise<T> => promise;
    const deadlines = this.#deadlines;
    const clock = this.#clock;
    const bounded = cancels
      ? boundedCall(call, { deadlines, clock, timeoutMs, what, cancels })
      : boundedCall(call, { deadlines, clock, timeoutMs, what });
    if (cancels && signalOf) this.#watchLater(bounded, cancels, signalOf);
    if (!state) return bounded;
    // Only a call still running reads its state, and it is still running only if the bound gave up on it: so any
    // rejection of the bound may mark it, without telling apart the call's own failure.
    return bounded.catch((error: unknown) => {
      state.abandoned = true;
      throw error;
    });
  }

  /** Once the call is slow, an abort of the caller's signal ends it (core's cancel, waiting in `cancels`). */
  #watchLater(
    bounded: Promise<unknown>,
    cancels: Set<(reason: unknown) => void>,
    signalOf: () => AbortSignal,
  ): void {
    let watched: AbortSignal | undefined;
    const cancel = (reason: unknown): void => {
      for (const each of [...cancels]) each(reason);
    };
    const onAbort = (): void => cancel(watched?.reason);
    const entry = this.#deadlines.add(this.#clock.monotonic() + WATCH_SIGNAL_AFTER_MS, () => {
      // Core takes its cancel out of the set once the call settled.
      if (cancels.size === 0) return;
      const signal = signalOf();
      if (signal.aborted) cancel(signal.reason);
      else {
        watched = signal;
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
    const done = (): void => {
      this.#deadlines.delete(entry);
      watched?.removeEventListener('abort', onAbort);
    };
    bounded.then(done, done);
  }
}
