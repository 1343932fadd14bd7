import type { Clock } from './clock.js';
import { LockLostError, LockReleasedError, type LostReason } from './errors.js';
import { Link } from './linked-set.js';
import type { Lease } from './service.js';

/** A handle's lifecycle: `held` until released or lost; `lost` and `released` are final. */
export type HandleState = 'held' | 'lost' | 'released';

/**
 * Owned access to one lock, from grant to release or loss. Use `await using h = await client.acquire(…)` or
 * `client.withLock(…)` so it is always released.
 *
 * Holding a handle is a belief, not a guarantee: a paused process can wake up after its lease expired and
 * another owner took over. Pass {@link LockHandle.fencingToken} to every protected write and let the resource
 * reject stale tokens (see `@dlock/fencing-pg`, `@dlock/fencing-kysely`).
 */
export interface LockHandle extends AsyncDisposable {
  /** The lock's name (for a permit, the semaphore's). */
  readonly name: string;
  /** Strictly increasing per lock name across grants; attach it to every protected write. */
  readonly fencingToken: bigint;
  /**
   * `held` until released or lost; `lost` and `released` are final. A handle whose validity window closed is
   * `lost` (reason `expired`) as soon as the client notices: at its next renewal tick, or at `release()`.
   */
  readonly state: HandleState;
  /** End of the usable window on the client's monotonic clock (`Clock.monotonic()`), drift already deducted. */
  readonly expiresAt: number;
  /** The TTL the service granted, which may exceed the one requested. */
  readonly ttlMs: number;
  /** Aborts when the handle leaves `held`; its reason is a `LockLostError` or a `LockReleasedError`. */
  readonly signal: AbortSignal;
  /**
   * Advisory: true while the state is `held` and the validity window has not passed by the local clock. Use it to
   * stop work early; it cannot make a write safe (only the fencing token checked at the resource can).
   */
  isHeld(): boolean;
  /**
   * Renews now. Resolves true when extended, false when the handle is no longer held (then without a network
   * call) or the service refused (the handle becomes Lost). Rejects with `TransportError` when the service could
   * not be reached; that failure counts against `renewFailBudget`. A renewal already in flight is not doubled:
   * the call shares its answer.
   */
  renew(): Promise<boolean>;
  /**
   * Ends the hold and tells the service. For a reentrant handle, only the last of the nested releases contacts the
   * service. Resolves when the lock was held up to this call; calling it again then resolves at once.
   *
   * Rejects with the handle's `LockLostError` when the lock did not last until this call: the handle was lost
   * earlier, or its validity window has closed (a pause past the lease). In that case the handle becomes `lost`
   * (reason `expired`), `onLost` runs once, and the owner-checked delete is still sent, so a lease that happens to
   * remain is freed and a successor's lock is never touched. Whatever ran under the lock must be treated as having
   * run without it.
   *
   * Rejects with `TransportError` if the service could not be told; the handle is released locally all the same
   * and the lease runs out by its TTL.
   */
  release(): Promise<void>;
}

/** What a handle needs from the client that made it. */
export interface HandleHost {
  readonly clock: Clock;
  renewNow(handle: Handle): Promise<boolean>;
  /** Ends one hold of `handle` (state `held`): checks the window, counts nesting, releases on the service. */
  release(handle: Handle): Promise<void>;
  disposeFailed(handle: Handle, error: unknown): void;
  pokeScheduler(): void;
}

type LostCallback = (handle: LockHandle, reason: LostReason) => void;

/** @internal The state table of one grant. Only the client mutates it. */
export class Handle implements LockHandle {
  readonly name: string;
  readonly fencingToken: bigint;
  readonly lease: Lease;
  /** A permit's slot; undefined for a lock. */
  readonly slot: number | undefined;
  /** What the fencing token is for: the lock's name, or a permit's `<semaphore>#<slot>`. */
  readonly resource: string;
  readonly acquiredAt: number;
  readonly reentrant: boolean;
  /** False for a lease granted once and left to run out (`renew: false`). */
  readonly renews: boolean;
  ttlMs: number;
  expiresAt: number;
  /** Monotonic time the next renewal is due. */
  renewDueAt: number;
  /**
   * The renewal in flight for this lease, if any: the outcomes of its batch, this handle's at `renewalIndex`, asked
   * for `renewalTtlMs`. One at a time, so answers arrive in the order the service applied their requests.
   */
  renewal: Promise<readonly (boolean | Error)[]> | undefined;
  renewalIndex = 0;
  renewalTtlMs = 0;
  /** Whether the renewal in flight counts a transport failure against `renewFailBudget`. */
  renewalCounted = true;
  /**
   * The shortest TTL a renewal asked for that got no answer here: the service may still apply it, after any later
   * renewal. Windows are never longer than this from a renewal's send time.
   */
  unsureTtlMs = Number.POSITIVE_INFINITY;
  renewFailures = 0;
  /** The transport error of the last renewal, until one succeeds: the window closing after it means unreachable. */
  lastRenewError: Error | undefined;
  /** Set when `close()` released this handle, so `withLock` can say the client closed, not that work finished. */
  releasedByClose = false;
  /** Nesting depth of reentrant acquires still to be released. */
  holds = 1;
  /** Its place among the client's held handles, and in the renewal scheduler's list. */
  readonly heldLink = new Link<Handle>(this);
  readonly renewalLink = new Link<Handle>(this);
  readonly #host: HandleHost;
  /** Created on first use of `signal`: most handles are never asked for one, and an abort is not free. */
  #controller: AbortController | undefined;
  /** Set once the handle ended; the signal's abort reason is built from it only when someone looks (errors capture
   * a stack). */
  #ended = false;
  /** The error this handle was lost with, made once: `release()` and the signal report the same one. */
  #lostError: LockLostError | undefined;
  /** Made when a callback is added: most handles have none. */
  #lostCallbacks: LostCallback[] | undefined;
  #state: HandleState = 'held';

  constructor(init: {
    host: HandleHost;
    lease: Lease;
    ttlMs: number;
    expiresAt: number;
    renewDueAt: number;
    /** When the client admitted the grant (its monotonic clock). */
    acquiredAt: number;
    reentrant: boolean;
    renews: boolean;
    onLost: LostCallback | undefined;
  }) {
    this.#host = init.host;
    this.lease = init.lease;
    this.name = init.lease.name;
    this.slot = init.lease.slot;
    this.resource = this.slot === undefined ? this.name : `${this.name}#${this.slot}`;
    this.fencingToken = init.lease.fencingToken;
    this.ttlMs = init.ttlMs;
    this.expiresAt = init.expiresAt;
    this.renewDueAt = init.renewDueAt;
    this.reentrant = init.reentrant;
    this.renews = init.renews;
    this.acquiredAt = init.acquiredAt;
    if (init.onLost) this.#lostCallbacks = [init.onLost];
  }

  get state(): HandleState {
    return this.#state;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#ended) this.#controller.abort(this.#endReason());
    }
    return this.#controller.signal;
  }

  isHeld(): boolean {
    if (this.#state !== 'held') return false;
    if (this.#host.clock.monotonic() < this.expiresAt) return true;
    // The window passed while nothing ran (a pause): answer now, let the renewal path make it official.
    this.#host.pokeScheduler();
    return false;
  }

  renew(): Promise<boolean> {
    if (this.#state !== 'held') return Promise.resolve(false);
    return this.#host.renewNow(this);
  }

  release(): Promise<void> {
    if (this.#state === 'released') return Promise.resolve();
    if (this.#lostError) return Promise.reject(this.#lostError);
    return this.#host.release(this);
  }

  /**
   * Releases at scope exit. A lock lost before the scope ended is thrown (`LockLostError`): the scope's work ran
   * without the lock, and a clean exit would say otherwise (if the body threw too, JavaScript reports both in a
   * `SuppressedError`). A release the service did not hear of is only reported as a `callback-error` event: the
   * lock was held to the end, and its lease runs out by itself.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      if (error instanceof LockLostError) throw error;
      this.#host.disposeFailed(this, error);
    }
  }

  /** @internal The error of a lost handle, undefined while it is not lost. */
  get lostError(): LockLostError | undefined {
    return this.#lostError;
  }

  /** @internal A reentrant acquire returned this handle. */
  retain(onLost: LostCallback | undefined): void {
    this.holds += 1;
    if (!onLost) return;
    if (this.#lostCallbacks) this.#lostCallbacks.push(onLost);
    else this.#lostCallbacks = [onLost];
  }

  /** @internal Moves to `released`. Returns false if already terminal. */
  markReleased(): boolean {
    if (this.#state !== 'held') return false;
    this.#state = 'released';
    this.holds = 0;
    this.#end();
    return true;
  }

  /** @internal Moves to `lost` and returns the callbacks to run (once each), or null if already terminal. */
  markLost(reason: LostReason, cause: unknown): LostCallback[] | null {
    if (this.#state !== 'held') return null;
    this.#state = 'lost';
    this.holds = 0;
    this.#lostError = new LockLostError(this.resource, this.fencingToken, reason, { cause });
    this.#end();
    const callbacks = this.#lostCallbacks ?? [];
    this.#lostCallbacks = undefined;
    return callbacks;
  }

  #end(): void {
    this.#ended = true;
    this.#controller?.abort(this.#endReason());
  }

  /** Why the handle ended: its loss, or a release. */
  #endReason(): Error {
    return this.#lostError ?? new LockReleasedError(this.resource, this.fencingToken);
  }
}
