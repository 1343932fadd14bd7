import { type Clock, systemClock } from '@dlock/core';
import { boundedCall, CallDeadlines } from '@dlock/core/adapter';

/**
 * A call still unanswered this long (ms) starts listening to its caller's abort signal. Reading core's request
 * signal makes an AbortController and a listener, about 10 µs, a real share of a fast acquire; a call that is this
 * slow can afford it, and an abort is then seen at most this much late.
 */
export const WATCH_SIGNAL_AFTER_MS = 20;

function same<T>(value: T): T {
  return value;
}

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
  /** The clock's monotonic time as the call is sent, if the caller has just read it (saves a reading). */
  readonly now?: number;
}

/**
 * Bounds every Redis call of the single-node service with core's {@link boundedCall} on one shared, unref'd
 * {@link CallDeadlines} timer (node-redis' own `timeout` only covers a command not yet written: a written command
 * whose reply never comes waits forever). What it sets on core's: the caller's signal is read only once a call is
 * slow (see {@link WATCH_SIGNAL_AFTER_MS}), and `state` tells the call that it was given up.
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
   * outcome means. One entry on the shared timer serves both the signal's read and the deadline (see core's
   * `signalAfterMs`), so a call that answers at once costs no set, listener or extra promise.
   */
  bound<T>(promise: Promise<T>, timeoutMs: number, what: string, options?: BoundOptions): Promise<T> {
    return this.boundAndMap(promise, timeoutMs, what, same, options);
  }

  /**
   * {@link bound}, answering `map(value)`: the reply is read in the reaction that settles the bound (core's `map`),
   * without a promise layer of its own. What `map` throws rejects the call.
   */
  boundAndMap<T, R>(
    promise: Promise<T>,
    timeoutMs: number,
    what: string,
    map: (value: T) => R | PromiseLike<R>,
    options?: BoundOptions,
  ): Promise<R> {
    const state = options?.state;
    return boundedCall(() => promise, {
      deadlines: this.#deadlines,
      clock: this.#clock,
      now: options?.now,
      timeoutMs,
      what,
      map,
      signal: options?.signal,
      signalAfterMs: WATCH_SIGNAL_AFTER_MS,
      // Only a call still running reads its state, and it is still running only if the bound gave up on it.
      onAbandon:
        state === undefined
          ? undefined
          : () => {
              state.abandoned = true;
            },
    });
  }
}
