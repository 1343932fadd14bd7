import type { CallOptionsLike } from './client-like.js';
import { transportError } from './errors.js';

/**
 * Runs one etcd call with a hard bound. The call gets a gRPC deadline (so gRPC cancels it and frees the stream),
 * and a local timer settles the promise even if the driver never starts the call (a reconnecting channel, a
 * stuck retry policy). Failures become `TransportError`s; `onLate` receives a value that arrives after the bound,
 * e.g. to undo a write nobody will use.
 *
 * With `signal`, the promise also settles (with the signal's reason) the moment the caller gives up, so that
 * whatever undoes the call can start then rather than at the deadline. The request itself stays in flight: etcd
 * may still apply it, which is why the caller must undo it, and why `onLate` still runs.
 */
export function withDeadline<T>(
  what: string,
  timeoutMs: number,
  call: (options: CallOptionsLike) => Promise<T>,
  onLate?: (value: T) => void,
  signal?: AbortSignal,
): Promise<T> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onAbort = (): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      reject(transportError(what, new Error(`no answer within ${timeoutMs} ms`)));
    }, timeoutMs);
    timer.unref();
    signal?.addEventListener('abort', onAbort, { once: true });
    let pending: Promise<T>;
    try {
      pending = call({ deadline: Date.now() + timeoutMs });
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => {
        if (settled) {
          onLate?.(value);
          return;
        }
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        reject(transportError(what, error));
      },
    );
  });
}

/** Settles as `promise` does, or rejects with the signal's reason as soon as it aborts, whichever comes first. */
export function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
