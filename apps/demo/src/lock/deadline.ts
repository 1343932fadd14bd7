import { systemClock } from '@dlock/core';
import { boundedCall, CallDeadlines } from '@dlock/core/adapter';
import { BackendError, oneLine } from '../errors.js';

/** One timer for every first contact the demo makes, as the library bounds its own calls. */
const deadlines = new CallDeadlines(systemClock);

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
  try {
    return await boundedCall(() => promise, {
      deadlines,
      clock: systemClock,
      timeoutMs: ms,
      what: 'the server',
    });
  } catch (error) {
    try {
      cleanup();
    } catch {
      // The driver may already have closed itself; the error that matters is the one above.
    }
    // The driver's own error, not core's wrapping of it; core's timeout wraps nothing.
    if (error instanceof Error && error.cause !== undefined)
      throw new BackendError(`${what}: ${explain(error.cause)}`);
    throw new BackendError(`${what}: no answer within ${ms / 1000} s`);
  }
}

/** How long a backend gets to answer the first time. */
export const CONNECT_MS = 4_000;
