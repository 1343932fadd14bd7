import type { Clock } from './clock.js';
import { isDLockError, TransportError } from './errors.js';

const SUPERSEDED = Symbol('superseded');

interface Deadline {
  readonly at: number;
  /** Settles the call: at its deadline with no reason (a timeout), or with `reason` when the owner stops. */
  readonly expire: (reason?: unknown) => void;
}

/**
 * One timer for the deadlines of every service call a client has in flight. A timer per call would cost a
 * `setTimeout` and a `clearTimeout` per call, and Node's timer lists can hit a slow path when durations come and go
 * (measured here at ~110 µs per `setTimeout`). Deadlines are added and removed in O(1); the timer is re-armed only
 * when a deadline earlier than the armed one arrives or when it fires.
 *
 * The timer is unref'd: it bounds calls, it does not keep the process alive (a real service's socket does that
 * while a call is in flight).
 */
export class CallDeadlines {
  readonly #clock: Clock;
  readonly #entries = new Set<Deadline>();
  #armedAt = Number.POSITIVE_INFINITY;
  #timer: AbortController | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  add(at: number, expire: (reason?: unknown) => void): Deadline {
    const entry: Deadline = { at, expire };
    this.#entries.add(entry);
    if (at < this.#armedAt) this.#arm(at);
    return entry;
  }

  delete(entry: Deadline): void {
    this.#entries.delete(entry);
  }

  /**
   * Cancels the timer and settles every call still in flight with `reason` (e.g. the owner was closed), so that no
   * caller is left with a promise that never settles once nothing bounds it any more.
   */
  stop(reason?: unknown): void {
    const pending = [...this.#entries];
    this.#entries.clear();
    for (const entry of pending) entry.expire(reason);
    this.#timer?.abort(SUPERSEDED);
    this.#timer = undefined;
    this.#armedAt = Number.POSITIVE_INFINITY;
  }

  #arm(at: number): void {
    this.#timer?.abort(SUPERSEDED);
    const timer = new AbortController();
    this.#timer = timer;
    this.#armedAt = at;
    this.#clock.sleep(Math.max(0, at - this.#clock.monotonic()), timer.signal, { unref: true }).then(
      () => {
        if (this.#timer !== timer) return;
        this.#timer = undefined;
        this.#armedAt = Number.POSITIVE_INFINITY;
        this.#fire();
      },
      () => {},
    );
  }

  #fire(): void {
    const now = this.#clock.monotonic();
    let next = Number.POSITIVE_INFINITY;
    for (const entry of [...this.#entries]) {
      if (entry.at <= now) {
        this.#entries.delete(entry);
        entry.expire();
      } else if (entry.at < next) {
        next = entry.at;
      }
    }
    if (next < this.#armedAt) this.#arm(next);
  }
}

export interface BoundedCallOptions<T> {
  readonly deadlines: CallDeadlines;
  readonly clock: Clock;
  /** The call fails with a `TransportError` when it has not settled after this many ms. */
  readonly timeoutMs: number;
  /** Aborting it settles the call at once with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /**
   * The call puts its cancel function here while in flight; calling it settles the call at once with the reason.
   * Cheaper than a listener on a shared signal when every call would add and remove one (the client's close).
   */
  readonly cancels?: Set<(reason: unknown) => void>;
  /** Receives the value if the call succeeds after it was abandoned, e.g. to release a grant nobody will use. */
  readonly onLate?: (value: T) => void;
  /** Describes the call in the timeout message. */
  readonly what: string;
}

/**
 * Runs one service call with a hard bound. Backend clients do not always bound their own calls (node-redis waits
 * forever for the reply to a command already written), so no public call may rely on them. Anything the service
 * throws that is not a dlock error becomes a `TransportError`.
 */
export function boundedCall<T>(
  call: (abandoned: () => AbortSignal) => Promise<T>,
  options: BoundedCallOptions<T>,
): Promise<T> {
  const { signal, onLate, cancels } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  // The signal that tells the call it was abandoned is made only if the call asks for it: an AbortController costs
  // a few µs, a real share of a fast acquire, and most calls finish without ever reading it.
  let inner: AbortController | undefined;
  let abandonedBy: { readonly reason: unknown } | undefined;
  const abandoned = (): AbortSignal => {
    if (!inner) {
      inner = new AbortController();
      if (abandonedBy) inner.abort(abandonedBy.reason);
    }
    return inner.signal;
  };
  const abandon = (reason: unknown): void => {
    abandonedBy ??= { reason };
    inner?.abort(reason);
  };
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      cancels?.delete(cancel);
      options.deadlines.delete(deadline);
      fn();
    };
    const cancel = (reason: unknown): void => {
      abandon(reason);
      finish(() => reject(reason));
    };
    const onAbort = (): void => cancel(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    cancels?.add(cancel);
    const deadline = options.deadlines.add(options.clock.monotonic() + options.timeoutMs, (reason) => {
      const error =
        reason ??
        new TransportError(`${options.what} did not answer within ${Math.round(options.timeoutMs)} ms`);
      abandon(error);
      finish(() => reject(error));
    });
    let pending: Promise<T>;
    try {
      pending = call(abandoned);
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => {
        if (settled) onLate?.(value);
        else finish(() => resolve(value));
      },
      (error: unknown) => {
        finish(() =>
          reject(
            isDLockError(error)
              ? error
              : new TransportError(`${options.what} failed: ${String(error)}`, { cause: error }),
          ),
        );
      },
    );
  });
}
