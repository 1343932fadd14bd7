import type { AcquireRequest, Grant } from '../service.js';

/**
 * Where a claim stands in its lock's server-side queue. `W` is whatever the driver needs to wait for its turn: the
 * key or node just ahead (etcd, ZooKeeper), or the holder's remaining lease (Redis, which hands the lock over).
 */
export type Standing<W> =
  /** First in line: the lock is this claim's, with this grant. */
  | {
      /** The lock is this claim's. */
      readonly kind: 'first';
      /** The grant the claim holds. */
      readonly grant: Grant;
    }
  /** Someone is ahead. */
  | {
      /** The claim waits its turn. */
      readonly kind: 'behind';
      /** What to wait on, passed to `QueueDriver.wait`. */
      readonly wait: W;
      /** When the holder's lease runs out, in ms, if known: passed on to a caller that does not wait. */
      readonly holderExpiresInMs?: number;
    }
  /** The claim has left the queue without us (its lease or session ended while it waited): start again. */
  | {
      /** The claim is no longer in the queue. */
      readonly kind: 'gone';
    };

/**
 * The atomic operations of a queueing lock protocol, and nothing else: core's {@link acquireInQueue} runs the
 * algorithm (enqueue, wait for my turn or a notice, re-check, leave on abort or deadline, give back a grant that
 * races the caller giving up, undo in the background what a failed call may have left). The shape follows
 * Curator's `LockInternals` and etcd's `concurrency.Mutex`; a driver is one page per backend.
 *
 * `C` is a claim: one attempt's place in the queue (its key, node or ticket), made before any I/O so that core can
 * always remove it, whatever happens to the request that wrote it.
 */
export interface QueueDriver<C, W> {
  /**
   * Names this attempt's claim without I/O (a random id, a slot): retried writes of it must be recognisable.
   * `startedAt` is when the acquire call began, on the tools' clock (the anchor for `Grant.queuedMs`); it is the same
   * for every claim of one call, also after a restart.
   */
  claim(request: AcquireRequest, context: { readonly startedAt: number }): C;
  /**
   * Writes the claim, in one atomic operation that also takes the lock when nobody is ahead, and says where it
   * stands. With `queue: false` (a caller that does not wait) a driver may leave the claim out of the queue when
   * someone is ahead; `leave` must then be a cheap no-op.
   */
  enqueue(claim: C, options: { readonly queue: boolean }): Promise<Standing<W>>;
  /** Re-reads where the claim stands, e.g. after a wake-up. Must verify the claim is still ours (etcd #11456). */
  check(claim: C): Promise<Standing<W>>;
  /**
   * Waits until what the claim waits for may have changed (the claim ahead left, a hand-off came, the holder's
   * lease ran out) or `ms` passed. Resolves with the new standing when the notice itself says it (a hand-off), or
   * `undefined` to have core re-check. Rejects with `signal.reason` when `signal` aborts.
   */
  wait(claim: C, wait: W, ms: number, signal: AbortSignal): Promise<Standing<W> | undefined>;
  /**
   * Removes the claim, checked against its owner, and gives the lock back if it was granted to this claim.
   * Idempotent; throws on a transport failure, after which core retries it in the background.
   */
  leave(claim: C): Promise<void>;
  /**
   * Optional: leaves the queue at the deadline in one atomic step that keeps the lock instead if it was handed to
   * this claim at the last moment (a backend whose release hands the lock over, like Redis). Resolves with the
   * claim's standing after the step: `first` keeps the grant, anything else means the claim is gone. Without it
   * core calls `leave`, which gives such a grant back.
   */
  giveUp?(claim: C): Promise<Standing<W>>;
}
