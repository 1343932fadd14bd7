import type { CallOptionsLike } from './client-like.js';
import { transportError } from './errors.js';

/**
 * Runs one etcd call with a hard bound. The call gets a gRPC deadline (so gRPC cancels it and frees the stream),
 * and a local timer settles the promise even if the driver never starts the call (a reconnecting channel, a
 * stuck retry policy). Failures become `TransportError`s; `onLate` receives a value that arrives after the bound,
 * e.g. to undo a write nobody will use.
 */
export function withDeadline<T>(
  what: string,
  timeoutMs: number,
  call: (options: CallOptionsLike) => Promise<T>,
  onLate?: (value: T) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      reject(transportError(what, new Error(`no answer within ${timeoutMs} ms`)));
    }, timeoutMs);
    timer.unref();
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
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(transportError(what, error));
      },
    );
  });
}
