export type WaiterEvent =
  /** A release handed the lock to this waiter. */
  | { readonly kind: 'granted'; readonly fence: bigint }
  /** The subscriber reconnected: a hand-off may have been missed, look again. */
  | { readonly kind: 'recheck' }
  /** The service is closing. */
  | { readonly kind: 'closed' };

export type WakeReason = WaiterEvent | { readonly kind: 'timer' } | { readonly kind: 'aborted' };

/** Importance when two events arrive before the waiter looks: a grant must never be overwritten by a recheck. */
const RANK: Record<WaiterEvent['kind'], number> = { recheck: 0, closed: 1, granted: 2 };

/**
 * One queued acquire, parked in this process until something happens to it. Events that arrive while it is not
 * parked (a hand-off that overtakes the reply of the script that queued it) are kept for the next `wait`.
 */
export class Waiter {
  #pending: WaiterEvent | undefined;
  #wake: ((reason: WakeReason) => void) | undefined;

  deliver(event: WaiterEvent): void {
    if (this.#wake) {
      this.#wake(event);
      return;
    }
    if (!this.#pending || RANK[event.kind] > RANK[this.#pending.kind]) this.#pending = event;
  }

  /** Resolves with the first of: a delivered event, `ms` elapsing, `signal` aborting. */
  wait(ms: number, signal: AbortSignal): Promise<WakeReason> {
    const pending = this.#pending;
    if (pending) {
      this.#pending = undefined;
      return Promise.resolve(pending);
    }
    if (signal.aborted) return Promise.resolve({ kind: 'aborted' });
    return new Promise<WakeReason>((resolve) => {
      const finish = (reason: WakeReason): void => {
        this.#wake = undefined;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(reason);
      };
      const onAbort = (): void => finish({ kind: 'aborted' });
      // Not unref'd: a caller awaiting a lock is work in progress, and the process must not exit under it.
      const timer = setTimeout(() => finish({ kind: 'timer' }), Math.max(0, ms));
      signal.addEventListener('abort', onAbort, { once: true });
      this.#wake = finish;
    });
  }
}
