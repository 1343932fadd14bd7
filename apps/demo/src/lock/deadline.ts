import { BackendError, oneLine } from '../errors.js';

/**
 * Waits for `promise` at most `ms`; on failure or timeout runs `cleanup` and throws a one-line `BackendError`
 * that starts with `what`. Drivers retry unreachable servers forever on their own; the demo must answer quickly.
 */
export async function within<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
  cleanup: () => void,
  explain: (error: unknown) => string = oneLine,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } catch (error) {
    try {
      cleanup();
    } catch {
      // The driver may already have closed itself; the error that matters is the one above.
    }
    throw new BackendError(`${what}: ${explain(error)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** How long a backend gets to answer the first time. */
export const CONNECT_MS = 4_000;
