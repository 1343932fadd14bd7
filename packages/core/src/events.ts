import { type AcquireTimeoutReason, type LostReason, textOf } from './errors.js';

/** What a handle holds: a lock (elections' leaderships included, which are locks), or a semaphore's permit. */
export type LockKind = 'lock' | 'permit';

/** The fields every event about a handle starts with. */
export interface LockEventBase {
  /** The lock's name; for a permit, the semaphore's name. */
  readonly name: string;
  /** The handle's fencing token. */
  readonly fencingToken: bigint;
  /** Client monotonic time of the event, in ms. */
  readonly at: number;
  /** A lock's handle or a semaphore's permit. */
  readonly kind: LockKind;
  /** A permit's slot; absent for a lock. */
  readonly slot?: number;
}

/** How an acquire that returned no handle ended; `closed` is `close()` ending the wait. */
export type AcquireFailure = 'timeout' | 'aborted' | 'closed' | 'error';

/** The events a {@link LockClient} emits, for logs, metrics and dashboards. */
export interface LockEventMap {
  /** An acquire returned a handle (a new grant, or a reentrant acquire sharing one already held). */
  acquired: LockEventBase & {
    /** The TTL the service granted, in ms. */
    readonly ttlMs: number;
    /** End of the usable window on the client's monotonic clock, in ms (as `LockHandle.expiresAt`). */
    readonly expiresAt: number;
    /** From the acquire call to the handle, in ms. */
    readonly waitedMs: number;
    /** Acquire requests sent to the service for this call. */
    readonly attempts: number;
    /** True when a reentrant acquire returned the already-held handle. */
    readonly reentered: boolean;
  };
  /** A renewal extended the lease. */
  renewed: LockEventBase & {
    /** The new end of the usable window on the client's monotonic clock, in ms. */
    readonly expiresAt: number;
    /** The renewal's round trip, in ms. */
    readonly latencyMs: number;
  };
  /**
   * A renewal failed with a transport error while the window was still open; it is retried within the window (and
   * the handle lost once `renewFailBudget` failures in a row are reached, when set). A refusal is a `lost` event.
   */
  'renew-failed': LockEventBase & {
    /** Failed renewals in a row, this one included. */
    readonly failures: number;
    /** What the renewal failed with (a `TransportError`). */
    readonly error: unknown;
  };
  /**
   * An acquire (or tryAcquire, or a permit's) that ends without a handle: once per call, as it settles. `waitedMs`
   * runs from the call to now, so `at − waitedMs` is when it began. A tryAcquire that finds the lock busy is a
   * `timeout` (its budget ran out) with no `error`.
   */
  'acquire-failed': {
    /** The lock's name, or the semaphore's. */
    readonly name: string;
    /** Client monotonic time the call settled, in ms. */
    readonly at: number;
    /** A lock or a semaphore's permit. */
    readonly kind: LockKind;
    /** From the call to now, in ms. */
    readonly waitedMs: number;
    /** Acquire requests sent to the service. */
    readonly attempts: number;
    /** How the call ended. */
    readonly outcome: AcquireFailure;
    /** Why the budget ran out, for a `timeout`. */
    readonly reason?: AcquireTimeoutReason;
    /** What the call rejected with; absent when it resolved null. */
    readonly error?: unknown;
  };
  /** `heldMs` runs from the grant to when the client noticed the loss. */
  lost: LockEventBase & {
    /** How the loss was noticed. */
    readonly reason: LostReason;
    /** From the grant to the loss being noticed, in ms. */
    readonly heldMs: number;
    /** The last renewal's transport error, for `unreachable`. */
    readonly error?: unknown;
  };
  /**
   * A release, emitted once the service answered (or the call failed): `heldMs` runs from the grant to the
   * `release()` call (the hold), `releaseMs` is the service call, so `at − releaseMs` is when the release began.
   * `result`: `deleted`; `not-found` when the service had nothing of this grant left (the lock had already been
   * taken from it, and `release()` rejects with a `LockLostError` unless `close()` released it; with
   * `afterUnansweredTry`, `close()`'s own earlier try may have deleted it, and no loss is known); `failed` when the
   * service could not be told (`error` says why; the lease runs out by its TTL).
   */
  released: LockEventBase & {
    /** From the grant to the `release()` call, in ms. */
    readonly heldMs: number;
    /** The release call to the service, in ms. */
    readonly releaseMs: number;
    /** What the service answered. */
    readonly result: 'deleted' | 'not-found' | 'failed';
    /**
     * Set (`true`) on a `not-found` from `close()`'s retried release when an earlier try of it failed or timed out:
     * that try may have deleted the lock itself, so the answer does not show the lock was taken from its holder.
     * Absent otherwise.
     */
    readonly afterUnansweredTry?: true;
    /** Why the service could not be told, for `failed`. */
    readonly error?: unknown;
  };
  /** A user callback (onLost, onRelease, an event listener) threw, or the promise it returned rejected; the library
   * caught it. */
  'callback-error': {
    /** The lock (or semaphore) the callback was for. */
    readonly name: string;
    /** Client monotonic time, in ms. */
    readonly at: number;
    /** Which callback threw, e.g. `onLost callback` or `lost listener`. */
    readonly source: string;
    /** What it threw. */
    readonly error: unknown;
  };
}

/** The name of an event: a key of {@link LockEventMap}. */
export type LockEventType = keyof LockEventMap;

/** @internal The fields every handle event starts with. */
export function handleEventBase(
  handle: { readonly name: string; readonly fencingToken: bigint; readonly slot: number | undefined },
  at: number,
): LockEventBase {
  const { name, fencingToken, slot } = handle;
  return slot === undefined
    ? { name, fencingToken, at, kind: 'lock' }
    : { name, fencingToken, at, kind: 'permit', slot };
}
/**
 * @internal Reports a rejection of what a user callback returned through `onError`. Callbacks are typed to return
 * nothing, but an `async` one type-checks all the same, and its rejected promise, left alone, is an unhandled
 * rejection: Node ends the process on one by default.
 */
export function catchReturned(result: unknown, onError: (error: unknown) => void): void {
  if ((typeof result !== 'object' || result === null) && typeof result !== 'function') return;
  try {
    const then = (result as { then?: unknown }).then;
    if (typeof then === 'function') then.call(result, undefined, onError);
  } catch (error) {
    // A thenable whose `then` throws: report it like a callback that threw.
    onError(error);
  }
}

/**
 * Calls a subscriber's callback and drops whatever goes wrong in it, for a caller that has nobody to hand it to: a
 * lock service's public `watch` and `watchChanges` call their subscribers themselves, from a timer, a microtask or a
 * client library's event handler. What the callback throws, a rejection of the promise it returns (an `async`
 * callback type-checks as `() => void`) and a throw from a returned thenable's `then` are all dropped: left alone,
 * the first is an uncaught exception and the second an unhandled rejection, either of which ends a Node process by
 * default, and a throw inside a client library's handler would also keep the other subscribers from hearing.
 *
 * @param callback - The subscriber, called once with no arguments (wrap one that takes some in an arrow function
 *   that returns what it returns, so that its rejection is dropped too).
 */
export function callSubscriber(callback: () => void): void {
  try {
    catchReturned((callback as () => unknown)(), ignore);
  } catch {
    // Nobody to hand it to: the callback's caller is the service itself.
  }
}

function ignore(): void {}

/**
 * A listener for the event `K`; what it throws, or a rejection of the promise it returns, is caught and reported as
 * a `callback-error` event.
 */
export type LockEventListener<K extends LockEventType> = (event: LockEventMap[K]) => void;

/** A small typed event stream. Listener exceptions never reach the code that emitted the event. */
export class LockEvents {
  readonly #listeners = new Map<LockEventType, Set<(event: never) => void>>();

  /** Subscribes; returns the unsubscribe function. */
  on<K extends LockEventType>(type: K, listener: LockEventListener<K>): () => void {
    let set = this.#listeners.get(type);
    if (!set) {
      set = new Set();
      this.#listeners.set(type, set);
    }
    set.add(listener as (event: never) => void);
    return () => this.off(type, listener);
  }

  /** Unsubscribes `listener` from `type`; nothing if it was not subscribed. */
  off<K extends LockEventType>(type: K, listener: LockEventListener<K>): void {
    this.#listeners.get(type)?.delete(listener as (event: never) => void);
  }

  /** @internal Whether anyone listens for `type`: an emitter can skip building an event nobody receives. */
  listens(type: LockEventType): boolean {
    return (this.#listeners.get(type)?.size ?? 0) > 0;
  }

  /** @internal */
  emit<K extends LockEventType>(type: K, event: LockEventMap[K]): void {
    const set = this.#listeners.get(type);
    if (!set || set.size === 0) {
      if (type === 'callback-error') {
        const e = event as LockEventMap['callback-error'];
        process.emitWarning(
          `dlock: ${e.source} for lock "${e.name}" threw: ${textOf(e.error)}`,
          'DLockWarning',
        );
      }
      return;
    }
    const report = (error: unknown): void => {
      if (type === 'callback-error') return;
      this.emit('callback-error', {
        name: 'name' in event ? String(event.name) : '',
        at: event.at,
        source: `${type} listener`,
        error,
      });
    };
    for (const listener of [...set]) {
      try {
        catchReturned((listener as (event: LockEventMap[K]) => unknown)(event), report);
      } catch (error) {
        report(error);
      }
    }
  }
}
