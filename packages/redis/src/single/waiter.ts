import { type Clock, systemClock } from '@dlock/core';
import { WakeSignal } from '@dlock/core/adapter';

export type WaiterEvent =
  /** A release handed the lock (or a semaphore's `slot`) to this waiter. */
  | { readonly kind: 'granted'; readonly fence: bigint; readonly slot?: number | undefined }
  /** The subscriber reconnected: a hand-off may have been missed, look again. */
  | { readonly kind: 'recheck' };

export type WakeReason = WaiterEvent | { readonly kind: 'timer' } | { readonly kind: 'aborted' };

const TIMER: WakeReason = { kind: 'timer' };
const RECHECK: WakeReason = { kind: 'recheck' };
const ABORTED: WakeReason = { kind: 'aborted' };

/**
 * One queued acquire's mailbox: core's {@link WakeSignal} (a notice that comes while the waiter is not parked is
 * kept for its next wait) plus what the notice said, which a `WakeSignal` cannot carry. A grant is never lost to a
 * later recheck: it is the highest fence handed over, kept until taken.
 */
export class Waiter {
  readonly #clock: Clock;
  readonly #signal = new WakeSignal();
  /** Highest fence handed to this waiter and not yet taken; 0 when none. */
  #fence = 0n;
  /** The slot that fence came with (a semaphore's hand-off). */
  #slot: number | undefined;
  #recheck = false;

  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  deliver(event: WaiterEvent): void {
    if (event.kind === 'granted') {
      if (event.fence > this.#fence) {
        this.#fence = event.fence;
        this.#slot = event.slot;
      }
    } else {
      this.#recheck = true;
    }
    this.#signal.notify();
  }

  /**
   * Resolves with the first of: a delivered event, `ms` elapsing, `signal` aborting. Not unref'd: a caller
   * awaiting a lock is work in progress, and the process must not exit under it.
   */
  async wait(ms: number, signal: AbortSignal): Promise<WakeReason> {
    try {
      await this.#signal.wait(this.#clock, ms, signal);
    } catch (error) {
      if (signal.aborted) return ABORTED;
      throw error;
    }
    const fence = this.#fence;
    if (fence > 0n) {
      this.#fence = 0n;
      this.#recheck = false;
      return { kind: 'granted', fence, slot: this.#slot };
    }
    if (this.#recheck) {
      this.#recheck = false;
      return RECHECK;
    }
    return TIMER;
  }
}
