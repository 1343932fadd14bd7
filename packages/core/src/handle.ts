import type { Clock } from './clock.js';
import { LockLostError, LockReleasedError, type LostReason } from './errors.js';
import type { Lease } from './service.js';

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
  readonly name: string;
  /** Strictly increasing per lock name across grants; attach it to every protected write. */
  readonly fencingToken: bigint;
  /** `held` until released or lost; `lost` and `released` are final. */
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
   * not be reached; that failure counts against `renewFailBudget`.
   */
  renew(): Promise<boolean>;
  /**
   * Idempotent. For a reentrant handle, only the last of the nested releases contacts the service. Resolves at once
   * on a lost handle. Rejects with `TransportError` if the service could not be told; the handle is released
   * locally all the same and the lease runs out by its TTL.
   */
  release(): Promise<void>;
}

/** What a handle needs from the client that made it. */
export interface HandleHost {
  readonly clock: Clock;
  renewNow(handle: Handle): Promise<boolean>;
  releaseNow(handle: Handle): Promise<void>;
  disposeFailed(handle: Handle, error: unknown): void;
  pokeScheduler(): void;
}

type LostCallback = (handle: LockHandle, reason: LostReason) => void;

/** @internal The state table of one grant. Only the client mutates it. */
export class Handle implements LockHandle {
  readonly name: string;
  readonly fencingToken: bigint;
  readonly lease: Lease;
  readonly acquiredAt: number;
  readonly reentrant: boolean;
  ttlMs: number;
  expiresAt: number;
  /** Monotonic time the next renewal is due. */
  renewDueAt: number;
  renewInFlight = false;
  renewFailures = 0;
  rttEstimateMs: number;
  /** Nesting depth of reentrant acquires still to be released. */
  holds = 1;
  readonly #host: HandleHost;
  /** Created on first use of `signal`: most handles are never asked for one, and an abort is not free. */
  #controller: AbortController | undefined;
  /** Builds the signal's abort reason; errors capture a stack, so only when someone looks. */
  #endReason: (() => Error) | undefined;
  readonly #lostCallbacks: LostCallback[] = [];
  #state: HandleState = 'held';

  constructor(init: {
    host: HandleHost;
    lease: Lease;
    ttlMs: number;
    expiresAt: number;
    renewDueAt: number;
    rttMs: number;
    reentrant: boolean;
    onLost: LostCallback | undefined;
  }) {
    this.#host = init.host;
    this.lease = init.lease;
    this.name = init.lease.name;
    this.fencingToken = init.lease.fencingToken;
    this.ttlMs = init.ttlMs;
    this.expiresAt = init.expiresAt;
    this.renewDueAt = init.renewDueAt;
    this.rttEstimateMs = init.rttMs;
    this.reentrant = init.reentrant;
    this.acquiredAt = init.host.clock.monotonic();
    if (init.onLost) this.#lostCallbacks.push(init.onLost);
  }

  get state(): HandleState {
    return this.#state;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#endReason) this.#controller.abort(this.#endReason());
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
    if (this.#state !== 'held') return Promise.resolve();
    if (this.holds > 1) {
      this.holds -= 1;
      return Promise.resolve();
    }
    return this.#host.releaseNow(this);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      // Disposal runs in `finally` position, where throwing would mask the body's own error.
      this.#host.disposeFailed(this, error);
    }
  }

  /** @internal A reentrant acquire returned this handle. */
  retain(onLost: LostCallback | undefined): void {
    this.holds += 1;
    if (onLost) this.#lostCallbacks.push(onLost);
  }

  /** @internal Moves to `released`. Returns false if already terminal. */
  markReleased(): boolean {
    if (this.#state !== 'held') return false;
    this.#state = 'released';
    this.holds = 0;
    this.#end(() => new LockReleasedError(this.name, this.fencingToken));
    return true;
  }

  /** @internal Moves to `lost` and returns the callbacks to run (once each), or null if already terminal. */
  markLost(reason: LostReason, cause: unknown): LostCallback[] | null {
    if (this.#state !== 'held') return null;
    this.#state = 'lost';
    this.holds = 0;
    this.#end(() => new LockLostError(this.name, this.fencingToken, reason, { cause }));
    return this.#lostCallbacks.splice(0);
  }

  #end(reason: () => Error): void {
    this.#endReason = reason;
    this.#controller?.abort(reason());
  }
}
