import type { Clock } from '@dlock/core';
import { boundedCall, CallDeadlines } from '@dlock/core/adapter';
import type { CallOptionsLike } from './client-like.js';

export interface RequestOptions<T> {
  /** Bound of this request; default the service's `requestTimeoutMs`. */
  readonly timeoutMs?: number;
  /**
   * Settles the request at once (with the signal's reason) when it aborts, so that whatever undoes the request can
   * start then rather than at its deadline. The request itself stays in flight: etcd may still apply it.
   */
  readonly signal?: AbortSignal | undefined;
  /** Receives a value that arrives after the request was given up, e.g. to undo a write nobody will use. */
  readonly onLate?: (value: T) => void;
}

/**
 * Every etcd request of one service, each with a hard bound: a gRPC deadline (so gRPC cancels the call and frees the
 * stream) and a deadline on core's `CallDeadlines`, one timer for all of them, which settles the promise even if the
 * driver never starts the call (a reconnecting channel, a stuck retry policy). Failures become `TransportError`s
 * (`etcd <what> failed: …`, with the driver's error as `cause`).
 */
export class EtcdRequests {
  readonly clock: Clock;
  readonly timeoutMs: number;
  readonly deadlines: CallDeadlines;

  constructor(clock: Clock, timeoutMs: number) {
    this.clock = clock;
    this.timeoutMs = timeoutMs;
    this.deadlines = new CallDeadlines(clock);
  }

  run<T>(
    what: string,
    call: (options: CallOptionsLike) => Promise<T>,
    options: RequestOptions<T> = {},
  ): Promise<T> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    // gRPC compares its deadline with the process's wall clock, whatever clock this service was given.
    return boundedCall(() => call({ deadline: Date.now() + timeoutMs }), {
      deadlines: this.deadlines,
      clock: this.clock,
      timeoutMs,
      what: `etcd ${what}`,
      signal: options.signal,
      ...(options.onLate ? { onLate: options.onLate } : {}),
    });
  }
}

/**
 * Runs `fn` once after `ms` on the clock, without keeping the process alive (stream idling, reconnect backoff,
 * keep-alives of queued leases: housekeeping, never a caller's wait). Returns a cancel function.
 */
export function later(clock: Clock, ms: number, fn: () => void): () => void {
  const cancel = new AbortController();
  clock.sleep(ms, cancel.signal, { unref: true }).then(fn, () => {});
  return () => cancel.abort();
}

/**
 * Half-closes, then cancels. The order matters with `etcd3`: a stream that errors while still writable makes it
 * mark the whole host failed and reset every channel to it; after `end()` the cancellation is quiet.
 */
export function closeStream(stream: {
  end(): void;
  cancel(): void;
  on(event: 'error', fn: () => void): unknown;
}): void {
  try {
    stream.on('error', () => {});
    stream.end();
    stream.cancel();
  } catch {
    // already closed
  }
}
