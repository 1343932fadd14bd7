import type { LostReason } from '../errors.js';
import type { LockHandle } from '../handle.js';
import type { ResolvedAcquireOptions } from '../options.js';
import type { PermitsInfo } from '../service.js';
import type { ResolvedSemaphoreOptions } from './options.js';
import { resolvePermitOptions } from './options.js';

/** Options of `client.semaphore(name, options)`; both required. */
export interface SemaphoreOptions {
  /** How many holders at once: an integer from 1 to 10,000. Stored by the service with every holder and waiter. */
  readonly permits: number;
  /** Each permit's lease in ms, renewed while held (an integer from 10 to 2^31−1). */
  readonly ttlMs: number;
}

/** Options of {@link Semaphore.acquire}, `tryAcquire` (without `waitMs`) and `withPermit`; all optional. */
export interface PermitOptions {
  /** How long to wait for a free permit, in ms (default 0: one attempt, never queues). */
  readonly waitMs?: number;
  /** Aborting it gives up the wait (the call rejects with `signal.reason`); nothing is left queued. */
  readonly signal?: AbortSignal;
  /** Called once if the permit is lost (not when released). */
  readonly onLost?: (permit: Permit, reason: LostReason) => void;
  /** `false`: a permit granted once for the TTL and left to run out ("at most N per period"). Default true. */
  readonly renew?: boolean;
  /**
   * A small string stored with the permit (at most 1,024 UTF-8 bytes) and returned by `Semaphore.inspect`, e.g.
   * `host:pid:job`. Needs a service that can return it (`LockService.inspectPermits`): `UnsupportedError` otherwise.
   */
  readonly metadata?: string;
}

/**
 * One permit of a semaphore: a lease on one slot, with the lifecycle of a lock handle (`held` → `lost` |
 * `released`, `signal`, `isHeld()`, `renew()`, `release()`, `await using`).
 *
 * A permit does not make a write safe by itself, any more than a lock does: fence every write to the slot's resource
 * with `resource` and `fencingToken`, which rises strictly per slot from one holder to the next.
 */
export interface Permit extends LockHandle {
  /** The semaphore's name. */
  readonly name: string;
  /** Which slot this permit holds: `0 … permits − 1`. */
  readonly slot: number;
  /** `<name>#<slot>`: the name to fence this slot's writes with (e.g. a row per slot in `@dlock/fencing-pg`). */
  readonly resource: string;
}

/** What a semaphore needs from the `LockClient` that made it. */
export interface SemaphoreHost {
  acquirePermit(
    name: string,
    permits: number,
    options: ResolvedAcquireOptions,
    orNull: boolean,
  ): Promise<Permit | null>;
  available(name: string, permits: number): Promise<number>;
  inspect(name: string, permits: number): Promise<PermitsInfo>;
  withHandle<T>(acquire: () => Promise<Permit>, fn: (permit: Permit) => Promise<T>): Promise<T>;
}

/**
 * A counting semaphore on the client's service: at most `permits` holders at once, each a leased permit that is
 * renewed with the client's other leases, lost like a lock, and freed on a crash within its TTL. Waiters are served
 * in the service's arrival order, one woken per release. Built once here; a backend supplies
 * `LockService.acquirePermit`.
 *
 * @example
 * ```ts
 * const gpus = client.semaphore('gpu-pool', { permits: 4, ttlMs: 10_000 });
 * await using permit = await gpus.acquire({ waitMs: 5_000 });
 * await runJob({ device: permit.slot, resource: permit.resource, fencingToken: permit.fencingToken });
 * ```
 */
export class Semaphore {
  /** The semaphore's name; it lives apart from any lock of the same name. */
  readonly name: string;
  /** How many holders at once. */
  readonly permits: number;
  /** Each permit's lease, in ms. */
  readonly ttlMs: number;
  readonly #host: SemaphoreHost;

  /** @internal Made by `LockClient.semaphore`. */
  constructor(name: string, options: ResolvedSemaphoreOptions, host: SemaphoreHost) {
    this.name = name;
    this.permits = options.permits;
    this.ttlMs = options.ttlMs;
    this.#host = host;
  }

  /**
   * Waits up to `waitMs` for a permit. Rejects with `AcquireTimeoutError` (reason `no-free-permit`) when the budget
   * runs out, `PermitsMismatchError` when the semaphore is in use with another `permits`, the signal's reason when
   * it aborts, `ClientClosedError` after `close()`, `TransportError` when the service cannot be reached.
   */
  acquire(options?: PermitOptions): Promise<Permit> {
    return this.#start(options, false) as Promise<Permit>;
  }

  /** One attempt that never queues and never overtakes a queued waiter: a permit, or null when none is free. */
  tryAcquire(options?: Omit<PermitOptions, 'waitMs'>): Promise<Permit | null> {
    return this.#start(options, true);
  }

  /**
   * Runs `fn` holding a permit and releases it afterwards, also when `fn` throws. Resolves with `fn`'s result only if
   * the permit was held until `fn` settled; a permit lost meanwhile rejects with its `LockLostError`.
   */
  withPermit<T>(options: PermitOptions | undefined, fn: (permit: Permit) => Promise<T>): Promise<T> {
    return this.#host.withHandle(() => this.acquire(options), fn);
  }

  /**
   * How many permits are free right now, read from the service (advisory: it may change at once). Rejects with
   * `TransportError` when the service cannot be reached or answers anything but a count from 0 to `permits`.
   */
  available(): Promise<number> {
    return this.#host.available(this.name, this.permits);
  }

  /**
   * Who holds the semaphore's permits right now, read from the service: `{ permits, held, waiters? }`, `held` by slot,
   * each with its `slot`, `ownerId` (the holding client's `ownerId`, or `''` for a slot the service sees taken by
   * something that is not one of its permit records, so that no client can take it), `fencingToken`, `expiresInMs` by the service's
   * clock (where the service knows) and the `metadata` it acquired with; `waiters` where the service can count them. Advisory, like
   * {@link available}. Rejects with `PermitsMismatchError` when the semaphore is in use with another `permits`,
   * `UnsupportedError` on a service without `inspectPermits`, `ClientClosedError` after `close()`.
   */
  inspect(): Promise<PermitsInfo> {
    return this.#host.inspect(this.name, this.permits);
  }

  #start(options: PermitOptions | undefined, orNull: boolean): Promise<Permit | null> {
    let resolved: ResolvedAcquireOptions;
    try {
      resolved = resolvePermitOptions(options, this.ttlMs, orNull);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#host.acquirePermit(this.name, this.permits, resolved, orNull);
  }
}
