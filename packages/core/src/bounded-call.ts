import type { Clock } from './clock.js';
import { isDLockError, TransportError } from './errors.js';

export interface BoundedCallOptions<T> {
  readonly clock: Clock;
  /** The call fails with a `TransportError` when it has not settled after this many ms. */
  readonly timeoutMs: number;
  /** Aborting it settles the call at once with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** Do not keep the process alive for the timeout timer (background work). */
  readonly unref?: boolean;
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
  call: (signal: AbortSignal) => Promise<T>,
  options: BoundedCallOptions<T>,
): Promise<T> {
  const { clock, timeoutMs, signal, onLate } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  const inner = new AbortController();
  const timer = new AbortController();
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      timer.abort();
      fn();
    };
    const onAbort = (): void => {
      inner.abort(signal?.reason);
      finish(() => reject(signal?.reason));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    clock.sleep(timeoutMs, timer.signal, { unref: options.unref ?? false }).then(
      () => {
        const error = new TransportError(`${options.what} did not answer within ${timeoutMs} ms`);
        inner.abort(error);
        finish(() => reject(error));
      },
      () => {},
    );
    let pending: Promise<T>;
    try {
      pending = call(inner.signal);
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
