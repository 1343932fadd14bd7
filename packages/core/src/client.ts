import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { boundedCall, CallDeadlines } from './bounded-call.js';
import { type Clock, systemClock } from './clock.js';
import { Election, type ElectionOptions } from './election/election.js';
import type { ElectionHost } from './election/election-host.js';
import { LeaderFeed } from './election/leader-feed.js';
import { resolveElectionOptions } from './election/options.js';
import {
  AcquireTimeoutError,
  type AcquireTimeoutReason,
  ClientClosedError,
  InvalidArgumentError,
  isDLockError,
  LockLostError,
  LockReleasedError,
  type LostReason,
  TransportError,
  textOf,
  UnsupportedError,
} from './errors.js';
import { type AcquireFailure, catchReturned, handleEventBase, LockEvents } from './events.js';
import { Handle, type HandleHost, type LockHandle } from './handle.js';
import { checkedAvailable, checkedLockInfo, checkedPermitsInfo } from './inspection.js';
import { LinkedSet } from './linked-set.js';
import {
  type AcquireOptions,
  type LockClientOptions,
  type ResolvedAcquireOptions,
  type ResolvedClientOptions,
  resolveAcquireOptions,
  resolveClientOptions,
  validateCallback,
  validateName,
} from './options.js';
import { PendingCallHold } from './pending-hold.js';
import { RenewalScheduler } from './renewal-scheduler.js';
import { resolveSemaphoreOptions } from './semaphore/options.js';
import { type Permit, Semaphore, type SemaphoreHost, type SemaphoreOptions } from './semaphore/semaphore.js';
import {
  type AcquireRequest,
  type AcquireResult,
  type Grant,
  type Lease,
  type LockInfo,
  type LockService,
  type PermitRequest,
  type PermitsInfo,
  quietUnsubscribe,
} from './service.js';
import { admissionMarginMs, fullJitterBackoff, jitter, renewIntervalMs, validUntil } from './timing.js';
import { linkSignals, unlessAborted, WakeSignal } from './wake-signal.js';

function defaultOwnerId(): string {
  return `${hostname()}:${process.pid}:${randomBytes(6).toString('hex')}`;
}

/**
 * Subscribes through the service (`call`) for a caller that asked for it: a service that throws is reported like any
 * other failure of the service, as a `TransportError` (a dlock error as it is), never as a raw exception. The caller
 * would otherwise wait for notices that never come.
 */
function subscribe(what: string, call: () => unknown): () => void {
  let unsubscribe: unknown;
  try {
    unsubscribe = call();
  } catch (error) {
    throw isDLockError(error)
      ? error
      : new TransportError(`${what} failed: ${textOf(error)}`, { cause: error });
  }
  return quietUnsubscribe(unsubscribe);
}

function isLockService(value: unknown): value is LockService {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return ['acquire', 'renew', 'release', 'watch'].every((m) => typeof v[m] === 'function');
}

/**
 * Acquires, renews and releases locks on one {@link LockService}. One client per process and backend is typical;
 * each client has its own owner id, so two clients (or processes) never share a lock by reentrancy.
 *
 * @example
 * ```ts
 * const client = new LockClient(new MemoryLockService());
 * await using lock = await client.acquire('invoice:42', { ttlMs: 10_000, waitMs: 2_000 });
 * await db.write(invoice, { fencingToken: lock.fencingToken });
 * ```
 */
export class LockClient {
  /** Typed stream of this client's events ({@link LockEventMap}): for logs, metrics and dashboards. */
  readonly events = new LockEvents();
  /**
   * This client's identity (`options.ownerId`, default `host:pid:random`): sent with every acquire, and what
   * `inspect` reports as the holder's `ownerId`. Informational; a grant's ownership is proven by its own token.
   */
  readonly ownerId: string;
  readonly #service: LockService;
  readonly #options: ResolvedClientOptions;
  readonly #clock: Clock;
  readonly #scheduler: RenewalScheduler;
  readonly #held = new LinkedSet<Handle>((handle) => handle.heldLink);
  readonly #reentrant = new Map<string, Handle>();
  readonly #watches = new Set<() => void>();
  readonly #pending = new Set<Promise<unknown>>();
  /**
   * Acquires and releases in flight that `close()` waits for: counted rather than kept in `#pending`, which saves a
   * settle listener (a promise and a closure) and a set entry per call. Calls that begin once `close()` has taken
   * its count are not waited for, as calls added to `#pending` after its snapshot are not.
   */
  #inFlight = 0;
  #countTaken = false;
  #drained: (() => void) | undefined;
  readonly #random: () => number;
  readonly #closing = new AbortController();
  /** Whether `close()` has begun: `#closing.signal.aborted`, read as a field (AbortSignal's getter checks its receiver). */
  #isClosing = false;
  /**
   * The deadlines of the acquire calls in flight, apart from every other call's: `close()` stops this list first,
   * which settles them at once. Cheaper than a cancel function in a set per call (`boundedCall`'s `cancels`): the
   * call's deadline entry is linked in any case.
   */
  readonly #acquireDeadlines: CallDeadlines;
  readonly #host: HandleHost;
  readonly #deadlines: CallDeadlines;
  readonly #hold = new PendingCallHold();
  #closed: Promise<void> | undefined;
  readonly #unwatchLeases: (() => void) | undefined;
  /** One leader feed per observed election name, shared by the observers in this client. */
  readonly #feeds = new Map<string, LeaderFeed>();
  readonly #electionHost: ElectionHost;
  readonly #semaphoreHost: SemaphoreHost;

  /**
   * Throws `InvalidArgumentError` for a value that is not a `LockService` or bad options, and `TransportError` (the
   * service's error as its `cause`) when the service's `watchLeases` throws.
   */
  constructor(service: LockService, options?: LockClientOptions) {
    if (!isLockService(service)) {
      throw new InvalidArgumentError(
        'service',
        'must implement LockService (acquire, renew, release, watch)',
      );
    }
    this.#service = service;
    this.#options = resolveClientOptions(options, { clock: systemClock, ownerId: defaultOwnerId });
    this.#clock = this.#options.clock;
    this.ownerId = this.#options.ownerId;
    const clock = this.#clock;
    this.#random = () => clock.random();
    this.#deadlines = new CallDeadlines(this.#clock);
    this.#acquireDeadlines = new CallDeadlines(this.#clock);
    // Every call in flight listens for close: thousands of concurrent acquires are normal, not a leak.
    setMaxListeners(0, this.#closing.signal);
    this.#scheduler = new RenewalScheduler({
      clock: this.#clock,
      deadlines: this.#deadlines,
      service,
      events: this.events,
      driftFactor: this.#options.driftFactor,
      renewFailBudget: this.#options.renewFailBudget,
      operationTimeoutMs: this.#options.operationTimeoutMs,
      lose: (handle, reason, error) => this.#lose(handle, reason, error),
    });
    const watchLeases = service.watchLeases;
    this.#unwatchLeases =
      watchLeases === undefined
        ? undefined
        : subscribe('watchLeases', () => watchLeases.call(service, (tokens) => this.#leasesLost(tokens)));
    this.#electionHost = {
      clock: this.#clock,
      ownerId: this.ownerId,
      service,
      closing: this.#closing.signal,
      acquire: (name, options) => this.acquire(name, options),
      call: (fn, what) =>
        this.#track(
          boundedCall(() => fn(), {
            deadlines: this.#deadlines,
            clock: this.#clock,
            timeoutMs: this.#options.operationTimeoutMs,
            signal: this.#closing.signal,
            what,
          }),
        ),
      assertOpen: () => this.#assertOpen(),
      lose: (handle, reason) => {
        if (handle instanceof Handle && handle.state === 'held') this.#lose(handle, reason, undefined);
      },
    };
    this.#semaphoreHost = {
      acquirePermit: (name, permits, opts, orNull) => {
        if (opts.metadata !== undefined && typeof this.#service.inspectPermits !== 'function') {
          return Promise.reject(
            new UnsupportedError(
              'options.metadata needs a service that can return it (LockService.inspectPermits)',
            ),
          );
        }
        return this.#acquire(name, opts, orNull, permits) as Promise<Permit | null>;
      },
      available: (name, permits) =>
        this.#electionHost
          .call(() => this.#service.availablePermits!(name, permits), `available permits of "${name}"`)
          .then((free) => checkedAvailable(free, name, permits)),
      inspect: (name, permits) => this.#inspectPermits(name, permits),
      withHandle: (handle, fn) => this.#withHandle(handle, fn),
    };
    this.#host = {
      clock: this.#clock,
      renewNow: (handle) => this.#hold.hold(this.#renewNow(handle)),
      // The release's service call is tracked (#releaseNow), which holds the process for it.
      release: (handle) => this.#releaseHold(handle),
      disposeFailed: (handle, error) => this.#callbackError(handle.name, 'release on dispose', error),
      pokeScheduler: () => this.#scheduler.poke(),
    };
  }

  /**
   * A leader election on this client's service: `campaign()` to lead (the leadership's `epoch` is a fencing token
   * for the election's name), `leader()` and `observe()` to follow, `runWhileLeader()` for a standby loop. The
   * election holds the lock named `name` while it leads. Throws `UnsupportedError` on a service that cannot store
   * and report the leader's value (`inspect` and `updateMetadata`), `InvalidArgumentError` for bad input.
   */
  election(name: string, options: ElectionOptions): Election {
    this.#assertOpen();
    const electionName = validateName(name);
    const opts = resolveElectionOptions(options);
    if (typeof this.#service.inspect !== 'function' || typeof this.#service.updateMetadata !== 'function') {
      throw new UnsupportedError(
        'elections need a service that stores a value with each grant (LockService.inspect and updateMetadata)',
      );
    }
    return new Election(electionName, opts, this.#electionHost, () => this.#feedOf(electionName, opts.ttlMs));
  }

  /**
   * A counting semaphore on this client's service: at most `permits` holders of `name` at once, each holding a leased
   * permit on one slot, fenced per slot (`permit.resource`, `permit.fencingToken`). Throws `UnsupportedError` on a
   * service without `acquirePermit`, `InvalidArgumentError` for bad input.
   */
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    this.#assertOpen();
    const semaphoreName = validateName(name);
    const opts = resolveSemaphoreOptions(options);
    if (
      typeof this.#service.acquirePermit !== 'function' ||
      typeof this.#service.availablePermits !== 'function'
    ) {
      throw new UnsupportedError(
        'semaphores need a service that hands out permits (LockService.acquirePermit and availablePermits)',
      );
    }
    return new Semaphore(semaphoreName, opts, this.#semaphoreHost);
  }

  /**
   * Who holds `name` right now, read from the service (never from this client's own handles): `held`, and for a held
   * lock the holder's `ownerId` (its client's {@link LockClient.ownerId}), `fencingToken`, `expiresInMs` by the
   * service's clock and the `metadata` it acquired with; `waiters` where the service queues and can count them.
   * Advisory: the answer may be stale the moment it arrives. Settles within `operationTimeoutMs` and keeps the process
   * alive until it does. Rejects with `UnsupportedError` on a service without `inspect`, `InvalidArgumentError` for a
   * bad name, `ClientClosedError` after `close()`, `TransportError` when the service cannot be reached.
   */
  inspect(name: string): Promise<LockInfo> {
    let lockName: string;
    try {
      this.#assertOpen();
      lockName = validateName(name);
      if (typeof this.#service.inspect !== 'function') {
        throw new UnsupportedError('inspect needs a service that reports its holders (LockService.inspect)');
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#electionHost
      .call(() => this.#service.inspect!(lockName), `inspect "${lockName}"`)
      .then((info) => checkedLockInfo(info, lockName));
  }

  #inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    try {
      this.#assertOpen();
      if (typeof this.#service.inspectPermits !== 'function') {
        throw new UnsupportedError(
          'inspecting a semaphore needs a service that reports its permits (LockService.inspectPermits)',
        );
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#electionHost
      .call(() => this.#service.inspectPermits!(name, permits), `inspect permits of "${name}"`)
      .then((info) => checkedPermitsInfo(info, name, permits));
  }

  /** Number of handles this client currently holds. */
  get heldCount(): number {
    return this.#held.size;
  }

  /**
   * Acquires `name`, waiting up to `options.waitMs` (default 0) while another owner holds it.
   * Rejects with `AcquireTimeoutError` when the budget runs out (its `reason` says why), `TransportError` when the
   * last attempt could not reach the service, the signal's reason when `options.signal` aborts,
   * `ClientClosedError` after `close()`. Settles within `waitMs + operationTimeoutMs` even if the service hangs,
   * and keeps the process alive until it does.
   */
  acquire(name: string, options: AcquireOptions): Promise<LockHandle> {
    return this.#start(name, options, false) as Promise<LockHandle>;
  }

  /** Like {@link acquire}, but resolves null instead of rejecting when the lock stays busy. */
  tryAcquire(name: string, options: AcquireOptions): Promise<LockHandle | null> {
    return this.#start(name, options, true);
  }

  /**
   * Both acquire calls, without an `async` wrapper: the caller gets #acquire's own promise (an async function
   * returning a promise would cost two more turns of the microtask queue). Bad input still rejects, never throws.
   */
  #start(name: string, options: AcquireOptions, orNull: boolean): Promise<LockHandle | null> {
    let lockName: string;
    let opts: ResolvedAcquireOptions;
    try {
      this.#assertOpen();
      lockName = validateName(name);
      opts = resolveAcquireOptions(options);
      if (opts.metadata !== undefined && typeof this.#service.inspect !== 'function') {
        throw new UnsupportedError(
          'options.metadata needs a service that can return it (LockService.inspect)',
        );
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#acquire(lockName, opts, orNull);
  }

  /**
   * Runs `fn` while holding `name` and releases afterwards, also when `fn` throws. `fn` should watch
   * `handle.signal` and pass `handle.fencingToken` to its writes.
   *
   * Resolves with `fn`'s result only if the lock was held until `fn` settled. If the lock was lost meanwhile
   * (also when `fn` ignored the signal), it rejects with that `LockLostError` once `fn` has settled, so a result
   * computed without the lock is never taken for a good one; if `close()` ended the hold, with `ClientClosedError`.
   * When `fn` throws, its error wins (a loss is still reported through `onLost` and the `lost` event).
   */
  withLock<T>(name: string, options: AcquireOptions, fn: (handle: LockHandle) => Promise<T>): Promise<T> {
    return this.#withHandle(() => this.acquire(name, options), fn);
  }

  /**
   * `withLock` and `withPermit`: checks `fn` before acquiring (a bad callback must not leave a hold behind), runs it
   * under the handle, then releases and says how the hold ended.
   */
  async #withHandle<H extends LockHandle, T>(
    acquire: () => Promise<H>,
    fn: (handle: H) => Promise<T>,
  ): Promise<T> {
    validateCallback(fn, 'fn');
    const handle = await acquire();
    const name = handle.name;
    let result: T;
    try {
      result = await fn(handle);
    } catch (error) {
      await this.#endWithLock(handle, name, false);
      // fn rethrowing the signal's reason after close() ended the hold: say what happened, the client closed.
      const closedUnder = (handle as unknown as Handle).releasedByClose && error instanceof LockReleasedError;
      throw closedUnder ? new ClientClosedError({ cause: error }) : error;
    }
    await this.#endWithLock(handle, name, true);
    return result;
  }

  /** Releases after `withLock`'s function; a loss is thrown only when `fn` succeeded (otherwise its error wins). */
  async #endWithLock(handle: LockHandle, name: string, rethrowLoss: boolean): Promise<void> {
    try {
      await handle.release();
    } catch (error) {
      if (error instanceof LockLostError) {
        if (rethrowLoss) throw error;
      } else {
        this.#callbackError(name, 'release after withLock', error);
      }
    }
    if (rethrowLoss && (handle as Handle).releasedByClose) throw new ClientClosedError();
  }

  /**
   * Calls `callback` when the service reports that `name` may have become free. Best effort (a notice can be
   * missed during a disconnect). Returns the unsubscribe function; `close()` unsubscribes everything. Throws
   * `InvalidArgumentError` for bad input, `ClientClosedError` after `close()`, and `TransportError` (the service's
   * error as its `cause`) when the service could not set the subscription up: no callback will come.
   */
  onRelease(name: string, callback: () => void): () => void {
    this.#assertOpen();
    const lockName = validateName(name);
    validateCallback(callback, 'callback');
    const report = (error: unknown): void => this.#callbackError(lockName, 'onRelease callback', error);
    const unwatch = subscribe(`watch "${lockName}"`, () =>
      this.#service.watch(lockName, () => {
        try {
          catchReturned((callback as () => unknown)(), report);
        } catch (error) {
          report(error);
        }
      }),
    );
    let active = true;
    const unsubscribe = (): void => {
      if (!active) return;
      active = false;
      this.#watches.delete(unsubscribe);
      unwatch();
    };
    this.#watches.add(unsubscribe);
    return unsubscribe;
  }

  /**
   * Idempotent. Stops renewals, rejects pending acquires with `ClientClosedError`, releases every held handle and
   * closes watches. Does not close the service, which the caller owns. A release that fails with a transport error
   * is tried again until `operationTimeoutMs` after the call; if one still did not get through, `close()` rejects
   * (once every other release settled) with a `TransportError` naming those locks, their errors in an
   * `AggregateError` as its `cause`: the handles are released locally all the same, and those leases run out by their
   * TTL. A lease acquired with `renew: false` is not released: it was granted for its TTL, and freeing it early would
   * let the work it guards run twice in one period; its handle is left to run out.
   */
  close(): Promise<void> {
    this.#closed ??= this.#hold.hold(this.#close()).finally(() => this.#hold.stop());
    return this.#closed;
  }

  /** `await using client = new LockClient(…)`: {@link close} at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #close(): Promise<void> {
    const closed = new ClientClosedError();
    this.#isClosing = true;
    this.#closing.abort(closed);
    this.#acquireDeadlines.stop(closed);
    // Renewals stop; leases granted with `renew: false` stay with the scheduler only to end as lost when their
    // window closes (it never renews or deletes them, and its timer does not keep the process alive).
    this.#scheduler.stop();
    this.#unwatchLeases?.();
    for (const unsubscribe of [...this.#watches]) unsubscribe();
    const now = this.#clock.monotonic();
    const until = now + this.#options.operationTimeoutMs;
    const failed: { name: string; error: unknown }[] = [];
    let sent = 0;
    const releases = this.#held.values().map((handle) => {
      if (!handle.renews) return Promise.resolve();
      // A window that closed before close() (a pause) is a loss, not a release: the delete still goes out.
      if (now >= handle.expiresAt) {
        this.#lose(handle, 'expired', undefined);
        return Promise.resolve();
      }
      handle.holds = 1;
      handle.releasedByClose = true;
      sent += 1;
      return this.#releaseOnClose(handle, now, until).catch((error: unknown) => {
        failed.push({ name: handle.resource, error });
      });
    });
    this.#countTaken = true;
    const drained =
      this.#inFlight === 0
        ? undefined
        : new Promise<void>((resolve) => {
            this.#drained = resolve;
          });
    await Promise.allSettled([...releases, ...this.#pending, drained]);
    // Only now, once the releases above are settled: the deadlines bound them. Calls still in flight (a manual
    // renew()) settle with ClientClosedError rather than never.
    this.#deadlines.stop(closed);
    if (failed.length > 0) {
      const names = failed.map((f) => JSON.stringify(f.name)).join(', ');
      throw new TransportError(
        // Not "the service did not hear of it": a try that timed out may have been applied all the same.
        `close() could not release ${failed.length} of ${sent} lock(s) (${names}): no try got a reply saying so, so each may stay held until its TTL runs out`,
        {
          cause: new AggregateError(
            failed.map((f) => f.error),
            'releases that failed at close()',
          ),
        },
      );
    }
  }

  /**
   * `close()`'s release of one handle: like {@link #releaseNow}, but a transport failure is retried until `until`
   * (close's bound), so a connection reset at shutdown does not leave the lock to its TTL. One `released` event,
   * with the last answer. Rejects with the last error when no try got through.
   */
  async #releaseOnClose(handle: Handle, startedAt: number, until: number): Promise<void> {
    this.#forget(handle);
    if (!handle.markReleased()) return;
    const counted = this.#enter();
    const clock = this.#clock;
    /** A try failed or timed out: it may have deleted the lock all the same, so a later not-found proves no loss. */
    let unanswered = false;
    try {
      for (let tries = 1; ; tries += 1) {
        const sentAt = clock.monotonic();
        try {
          const deleted = await boundedCall(() => this.#service.release(handle.lease), {
            deadlines: this.#deadlines,
            clock,
            now: sentAt,
            timeoutMs: Math.max(1, until - sentAt),
            what: `release "${handle.name}"`,
          });
          this.#emitReleased(
            handle,
            startedAt,
            deleted === false ? 'not-found' : 'deleted',
            undefined,
            deleted === false && unanswered,
          );
          return;
        } catch (error) {
          unanswered = true;
          const now = clock.monotonic();
          const backoff = fullJitterBackoff(
            tries - 1,
            this.#options.retryBaseMs,
            this.#options.retryCapMs,
            this.#random,
          );
          // At least 5 ms: a refused connection fails at once, and a tighter loop would only burn CPU.
          const delay = Math.max(5, Math.min(backoff, (until - now) / 3));
          if (!(error instanceof TransportError) || now + delay >= until) {
            this.#emitReleased(handle, startedAt, 'failed', error);
            throw error;
          }
          await clock.sleep(delay);
        }
      }
    } finally {
      this.#leave(counted);
    }
  }

  #feedOf(name: string, ttlMs: number): LeaderFeed {
    let feed = this.#feeds.get(name);
    if (!feed) {
      // Half a lease: a leader that died without resigning is seen gone within that much of its expiry.
      const created = new LeaderFeed(name, this.#electionHost, Math.max(5, Math.floor(ttlMs / 2)), () => {
        if (this.#feeds.get(name) === created) this.#feeds.delete(name);
      });
      feed = created;
      this.#feeds.set(name, feed);
    }
    return feed;
  }

  #assertOpen(): void {
    if (this.#isClosing) throw new ClientClosedError();
  }

  /** A call `close()` waits for, during which the process stays alive: one settle listener does both. */
  #track<T>(promise: Promise<T>): Promise<T> {
    this.#pending.add(promise);
    this.#hold.enter();
    const forget = (): void => {
      this.#pending.delete(promise);
      this.#hold.leave();
    };
    promise.then(forget, forget);
    return promise;
  }

  /**
   * Begins a call `close()` waits for, during which the process stays alive; pass what it returns to {@link #leave}
   * when the call ends (in a `finally`, so that it is before the call's promise settles).
   */
  #enter(): boolean {
    this.#hold.enter();
    if (this.#countTaken) return false;
    this.#inFlight += 1;
    return true;
  }

  #leave(counted: boolean): void {
    this.#hold.leave();
    if (counted && --this.#inFlight === 0) this.#drained?.();
  }

  /**
   * With `orNull` (tryAcquire), a budget that runs out resolves null: no error is built only to be dropped. With
   * `permits`, a permit of the semaphore `name` (the service queues its waiters itself: no watch, no reentrancy).
   */
  async #acquire(
    name: string,
    opts: ResolvedAcquireOptions,
    orNull: boolean,
    permits?: number,
  ): Promise<LockHandle | null> {
    const counted = this.#enter();
    const clock = this.#clock;
    const { retryBaseMs, retryCapMs, operationTimeoutMs } = this.#options;
    const startedAt = clock.monotonic();
    const deadline = startedAt + opts.waitMs;
    // Without a caller's signal, the close signal as it is: no linked controller and no listeners to remove.
    const linked = opts.signal === undefined ? undefined : linkSignals(opts.signal, this.#closing.signal);
    const signal = linked === undefined ? this.#closing.signal : linked.signal;
    /** Made when the call first has to wait: an acquire that answers at once never does. */
    let wake: WakeSignal | undefined;
    let unwatch: (() => void) | undefined;
    let attempts = 0;
    let lastError: unknown;
    /** Whether the last answer was a grant given back for lack of validity, not a refusal. */
    let spentInTransit = false;
    try {
      for (;;) {
        if (signal.aborted) throw signal.reason;
        // Set when this client holds the lock but could not extend it for this caller: no fresh attempt then.
        let shared = false;
        if (opts.reentrant && permits === undefined) {
          const current = this.#reentrant.get(name);
          if (current?.isHeld()) {
            if (current.renews !== opts.renew) {
              throw new InvalidArgumentError(
                'options.renew',
                `must match the reentrant handle already held for "${name}" (renew: ${current.renews})`,
              );
            }
            const ttlMs = this.#reentryTtl(current, opts.ttlMs);
            if (ttlMs === undefined) {
              current.retain(opts.onLost);
              return this.#handOut(current, startedAt, attempts, true);
            }
            attempts += 1;
            let extended = false;
            try {
              // Extended, or refused (the handle is then lost, and the next round takes the lock afresh).
              extended = await unlessAborted(
                this.#scheduler.renewOne(current, ttlMs, false, deadline + operationTimeoutMs),
                signal,
              );
              lastError = undefined;
            } catch (error) {
              if (signal.aborted) throw signal.reason;
              if (!(error instanceof TransportError)) throw error;
              lastError = error;
            }
            if (extended && current.isHeld()) {
              current.retain(opts.onLost);
              return this.#handOut(current, startedAt, attempts, true);
            }
            // Still ours but not extended (the service could not be reached): retry within the budget, as a fresh
            // acquire would. Lost: take it afresh at once.
            shared = current.isHeld();
            if (!shared) continue;
          }
        }
        let result: AcquireResult | undefined;
        if (!shared) {
          attempts += 1;
          // The first attempt goes out right after the call began: its clock reading serves (an earlier send time only
          // makes the validity window shorter).
          const sentAt = attempts === 1 ? startedAt : clock.monotonic();
          const remaining = Math.max(0, deadline - sentAt);
          try {
            result = await boundedCall(
              (abandoned) => {
                const request = new AttemptRequest(name, this.ownerId, opts, remaining, abandoned);
                if (permits === undefined) return this.#service.acquire(request);
                return this.#service.acquirePermit!(permitRequest(request, permits));
              },
              {
                deadlines: this.#acquireDeadlines,
                clock,
                now: sentAt,
                timeoutMs: remaining + operationTimeoutMs,
                // The caller's own signal, if any (linked with close); close itself reaches the call through
                // `#acquireDeadlines`, which saves a listener on the shared close signal per call.
                signal: opts.signal === undefined ? undefined : signal,
                what: `acquire "${name}"`,
                onLate: (late) => {
                  if (late.acquired) this.#abandon(name, late.grant, permits);
                },
              },
            );
            lastError = undefined;
          } catch (error) {
            if (signal.aborted) throw signal.reason;
            if (!(error instanceof TransportError)) throw error;
            lastError = error;
          }
          if (result?.acquired) {
            const handle = this.#admit(name, result.grant, sentAt, opts, signal, permits);
            if (handle) return this.#handOut(handle, startedAt, attempts, false);
          }
        }
        if (result) spentInTransit = result.acquired;
        const now = clock.monotonic();
        if (now >= deadline) {
          if (lastError !== undefined) throw lastError;
          const reason =
            permits === undefined
              ? this.#refusal(name, spentInTransit)
              : spentInTransit
                ? 'spent-in-transit'
                : 'no-free-permit';
          if (orNull) {
            this.#emitFailed(name, permits, startedAt, attempts, 'timeout', reason, undefined);
            return null;
          }
          throw new AcquireTimeoutError(name, now - startedAt, attempts, reason);
        }
        wake ??= new WakeSignal();
        const woken = wake;
        // A semaphore's waiters queue on the service, which wakes them; a lock's release notices come from `watch`.
        if (permits === undefined) unwatch ??= this.#watchQuietly(name, () => woken.notify());
        const hint = result && !result.acquired ? result.holderExpiresInMs : undefined;
        const backoff = fullJitterBackoff(attempts - 1, retryBaseMs, retryCapMs, this.#random);
        // An expiry hint says exactly when to look again; a little jitter keeps waiters from arriving together.
        const delay =
          hint !== undefined && Number.isFinite(hint) && hint >= 0
            ? Math.min(retryCapMs, hint + clock.random() * retryBaseMs)
            : backoff;
        await woken.wait(clock, Math.min(delay, deadline - now), signal);
      }
    } catch (error) {
      if (error instanceof AcquireTimeoutError) {
        // tryAcquire's null for a budget that ran out, whichever way the AcquireTimeoutError came.
        const failed = orNull ? undefined : error;
        this.#emitFailed(name, permits, startedAt, attempts, 'timeout', error.reason, failed);
        if (orNull) return null;
      } else {
        const outcome: AcquireFailure = opts.signal?.aborted
          ? 'aborted'
          : this.#closing.signal.aborted
            ? 'closed'
            : 'error';
        this.#emitFailed(name, permits, startedAt, attempts, outcome, undefined, error);
      }
      throw error;
    } finally {
      unwatch?.();
      linked?.dispose();
      this.#leave(counted);
    }
  }

  /**
   * The TTL to renew a reentrant handle with before it is shared with a caller that asked for `ttlMs`, or undefined
   * if it already gives that caller what a fresh grant would: a TTL at least `ttlMs` (the lease renews itself), or,
   * for a lease granted once (`renew: false`), a window that lasts at least as long as a fresh grant's. Never less
   * than the handle's own TTL: its other holders asked for that.
   */
  #reentryTtl(handle: Handle, ttlMs: number): number | undefined {
    const enough = handle.renews
      ? handle.ttlMs >= ttlMs
      : handle.expiresAt >= validUntil(this.#clock.monotonic(), ttlMs, this.#options.driftFactor);
    return enough ? undefined : Math.max(ttlMs, handle.ttlMs);
  }

  /** Why the budget ran out: this client's own other handle, grants that arrived too late, or another owner. */
  #refusal(name: string, spentInTransit: boolean): AcquireTimeoutReason {
    // A permit of a semaphore of the same name is not this lock: semaphores live apart from locks.
    const own = this.#held.find(
      (handle) => handle.name === name && handle.slot === undefined && handle.isHeld(),
    );
    if (own !== undefined) return 'held-by-this-client';
    return spentInTransit ? 'spent-in-transit' : 'held-by-another-owner';
  }

  /** Watches are a latency optimisation: a service that cannot set one up leaves the waiter to its backoff. */
  #watchQuietly(name: string, onReleased: () => void): () => void {
    try {
      return quietUnsubscribe(this.#service.watch(name, onReleased));
    } catch {
      return () => {};
    }
  }

  /** Turns a grant into a handle, unless it is already useless (caller gone, or no validity left). */
  #admit(
    name: string,
    grant: Grant,
    sentAt: number,
    opts: ResolvedAcquireOptions,
    signal: AbortSignal,
    permits: number | undefined,
  ): Handle | null {
    const clock = this.#clock;
    if (!isValidGrant(grant, permits)) {
      throw new TransportError(`the service returned a malformed grant for "${name}"`);
    }
    const now = clock.monotonic();
    // The TTL started no earlier than the request that won, which a queueing service reports; never after `now`.
    const anchor = sentAt + Math.min(grant.queuedMs ?? 0, now - sentAt);
    // One request's round trip: what a renewal will take. A service that made several reports the last one's.
    const roundTrip = Math.min(grant.roundTripMs ?? Number.POSITIVE_INFINITY, now - anchor);
    const expiresAt = validUntil(anchor, grant.ttlMs, this.#options.driftFactor);
    if (signal.aborted || expiresAt - now <= admissionMarginMs(roundTrip)) {
      // Never hand out a handle whose window has already closed (node-redlock #296); free the lock for others.
      this.#abandon(name, grant, permits);
      if (signal.aborted) throw signal.reason;
      return null;
    }
    const handle = new Handle({
      host: this.#host,
      lease: this.#leaseOf(name, grant, permits),
      ttlMs: grant.ttlMs,
      expiresAt,
      renewDueAt: anchor + jitter(renewIntervalMs(grant.ttlMs), this.#random),
      acquiredAt: now,
      reentrant: opts.reentrant,
      renews: opts.renew,
      onLost: opts.onLost,
    });
    this.#held.add(handle);
    if (opts.reentrant && !this.#reentrant.get(name)?.isHeld()) this.#reentrant.set(name, handle);
    this.#scheduler.add(handle);
    return handle;
  }

  /**
   * Reports the grant and returns the handle, unless an `acquired` listener called `close()`, which released it:
   * the acquire was then still pending at close() and must not resolve with a handle that is not held.
   */
  #handOut(handle: Handle, startedAt: number, attempts: number, reentered: boolean): Handle {
    this.#emitAcquired(handle, startedAt, attempts, reentered);
    if (handle.state !== 'held') throw handle.lostError ?? new ClientClosedError();
    return handle;
  }

  #emitAcquired(handle: Handle, startedAt: number, attempts: number, reentered: boolean): void {
    // Most clients have no listener: then the event is not even built.
    if (!this.events.listens('acquired')) return;
    const at = this.#clock.monotonic();
    this.events.emit('acquired', {
      ...handleEventBase(handle, at),
      ttlMs: handle.ttlMs,
      expiresAt: handle.expiresAt,
      waitedMs: at - startedAt,
      attempts,
      reentered,
    });
  }

  #emitFailed(
    name: string,
    permits: number | undefined,
    startedAt: number,
    attempts: number,
    outcome: AcquireFailure,
    reason: AcquireTimeoutReason | undefined,
    error: unknown,
  ): void {
    if (!this.events.listens('acquire-failed')) return;
    const at = this.#clock.monotonic();
    this.events.emit('acquire-failed', {
      name,
      at,
      kind: permits === undefined ? 'lock' : 'permit',
      waitedMs: at - startedAt,
      attempts,
      outcome,
      ...(reason === undefined ? {} : { reason }),
      ...(error === undefined ? {} : { error }),
    });
  }

  /** Releases a grant nobody will use, in the background; the service's ownership check makes this always safe. */
  #abandon(name: string, grant: Grant, permits: number | undefined): void {
    this.#bestEffortRelease(this.#leaseOf(name, grant, permits));
  }

  #leaseOf(name: string, grant: Grant, permits: number | undefined): Lease {
    const lease: Lease = {
      name,
      ownerId: this.ownerId,
      ownershipToken: grant.ownershipToken,
      fencingToken: grant.fencingToken,
    };
    return permits === undefined || grant.slot === undefined ? lease : { ...lease, slot: grant.slot };
  }

  #bestEffortRelease(lease: Lease): void {
    boundedCall(() => this.#service.release(lease), {
      deadlines: this.#deadlines,
      clock: this.#clock,
      timeoutMs: this.#options.operationTimeoutMs,
      what: `release "${lease.name}"`,
    }).catch(() => {});
  }

  #forget(handle: Handle): void {
    this.#held.delete(handle);
    this.#scheduler.remove(handle);
    if (handle.reentrant && this.#reentrant.get(handle.name) === handle) this.#reentrant.delete(handle.name);
  }

  async #renewNow(handle: Handle): Promise<boolean> {
    if (this.#closing.signal.aborted) throw new ClientClosedError();
    // A window that already closed cannot be extended, and a renewal sent now would only blur why it ended.
    if (this.#clock.monotonic() >= handle.expiresAt) {
      this.#lose(handle, 'expired', undefined);
      return false;
    }
    return this.#scheduler.renewOne(handle);
  }

  /**
   * One `release()` of a handle still in state `held`. Its window is checked first: a release after the window
   * closed (a pause past the lease) must not report a clean end. The handle is then lost, and `#lose` still sends
   * the owner-checked delete.
   */
  #releaseHold(handle: Handle): Promise<void> {
    const now = this.#clock.monotonic();
    if (now >= handle.expiresAt) this.#lose(handle, 'expired', undefined);
    const lost = handle.lostError;
    if (lost) return Promise.reject(lost);
    if (handle.holds > 1) {
      handle.holds -= 1;
      return Promise.resolve();
    }
    return this.#releaseNow(handle, now);
  }

  /**
   * `startedAt`: the clock's monotonic time as the release begins, just read by the caller. Not `async`: the reply
   * is read in the reaction that settles the bound call (its `map`), a failure in its `onError`, so that a release
   * costs no promise layer of its own. Both end the call's count before the caller hears.
   */
  #releaseNow(handle: Handle, startedAt: number): Promise<void> {
    // Forget first and synchronously: no renewal may be sent for a handle once its release has begun.
    this.#forget(handle);
    if (!handle.markReleased()) return Promise.resolve();
    const counted = this.#enter();
    return boundedCall(() => this.#service.release(handle.lease), {
      deadlines: this.#deadlines,
      clock: this.#clock,
      now: startedAt,
      timeoutMs: this.#options.operationTimeoutMs,
      what: `release "${handle.name}"`,
      map: (deleted: boolean) => {
        this.#leave(counted);
        this.#emitReleased(handle, startedAt, deleted === false ? 'not-found' : 'deleted', undefined);
        // The service found nothing of this grant to delete although its window was open: the lock had already
        // been taken from it (deleted by hand, a failover, a server clock jump). The release happened; a clean end
        // did not. (close() releases through #releaseOnClose, which reports not-found without a loss.)
        if (deleted === false) {
          throw new LockLostError(handle.resource, handle.fencingToken, 'rejected');
        }
      },
      onError: (error) => {
        this.#emitReleased(handle, startedAt, 'failed', error);
        this.#leave(counted);
      },
    });
  }

  #emitReleased(
    handle: Handle,
    startedAt: number,
    result: 'deleted' | 'not-found' | 'failed',
    error: unknown,
    afterUnansweredTry = false,
  ): void {
    if (!this.events.listens('released')) return;
    const at = this.#clock.monotonic();
    this.events.emit('released', {
      ...handleEventBase(handle, at),
      heldMs: startedAt - handle.acquiredAt,
      releaseMs: at - startedAt,
      result,
      ...(afterUnansweredTry ? { afterUnansweredTry: true } : {}),
      ...(error === undefined ? {} : { error }),
    });
  }

  #lose(handle: Handle, reason: LostReason, error: unknown): void {
    this.#forget(handle);
    const callbacks = handle.markLost(reason, error);
    if (!callbacks) return;
    // The lease may still exist on the service (e.g. it was only unreachable): free it early for the next owner.
    // Not a lease granted for its TTL (`renew: false`): its local window ends a little before the service's, and
    // deleting it then would let the work it guards run twice in one period.
    if (reason !== 'rejected' && handle.renews) this.#bestEffortRelease(handle.lease);
    const at = this.#clock.monotonic();
    this.events.emit('lost', {
      ...handleEventBase(handle, at),
      reason,
      heldMs: at - handle.acquiredAt,
      ...(error === undefined ? {} : { error }),
    });
    const report = (callbackError: unknown): void =>
      this.#callbackError(handle.name, 'onLost callback', callbackError);
    for (const callback of callbacks) {
      try {
        catchReturned((callback as (h: LockHandle, r: LostReason) => unknown)(handle, reason), report);
      } catch (callbackError) {
        report(callbackError);
      }
    }
  }

  /** The service says these grants are gone (e.g. their session expired): no need to wait for a renewal. */
  #leasesLost(ownershipTokens: readonly string[]): void {
    if (!Array.isArray(ownershipTokens) || ownershipTokens.length === 0) return;
    const gone = new Set(ownershipTokens);
    for (const handle of this.#held.values()) {
      if (gone.has(handle.lease.ownershipToken)) this.#lose(handle, 'rejected', undefined);
    }
  }

  #callbackError(name: string, source: string, error: unknown): void {
    this.events.emit('callback-error', { name, at: this.#clock.monotonic(), source, error });
  }
}

/**
 * The request of one attempt; its signal is made on first read: a service that answers at once never pays for it.
 * A class, not an object literal with a getter: a literal's getter is a new closure per request, and each request
 * then gets a hidden class of its own, made in the old generation, which keeps every young object of the attempt
 * alive through the next scavenges (measured: a mark-compact every ~10,000 acquires, ~8 µs of GC per acquire).
 */
class AttemptRequest implements AcquireRequest {
  readonly name: string;
  readonly ownerId: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  /** Absent, not undefined, when there is none (no field initializer: see the constructor). */
  declare readonly metadata?: string;
  readonly #abandoned: () => AbortSignal;

  constructor(
    name: string,
    ownerId: string,
    opts: ResolvedAcquireOptions,
    waitMs: number,
    abandoned: () => AbortSignal,
  ) {
    this.name = name;
    this.ownerId = ownerId;
    this.ttlMs = opts.ttlMs;
    this.waitMs = waitMs;
    this.#abandoned = abandoned;
    if (opts.metadata !== undefined) (this as { metadata?: string }).metadata = opts.metadata;
  }

  get signal(): AbortSignal {
    return this.#abandoned();
  }
}

/** A permit's request: the attempt's own request object, so its lazily made signal stays lazy. */
function permitRequest(request: AcquireRequest, permits: number): PermitRequest {
  return Object.defineProperty(request, 'permits', { value: permits, enumerable: true }) as PermitRequest;
}

function isValidGrant(grant: unknown, permits: number | undefined): grant is Grant {
  if (typeof grant !== 'object' || grant === null) return false;
  const g = grant as Record<string, unknown>;
  const slot = g['slot'];
  if (
    permits !== undefined &&
    !(Number.isInteger(slot) && (slot as number) >= 0 && (slot as number) < permits)
  ) {
    return false;
  }
  return (
    typeof g['ownershipToken'] === 'string' &&
    typeof g['fencingToken'] === 'bigint' &&
    typeof g['ttlMs'] === 'number' &&
    Number.isFinite(g['ttlMs']) &&
    g['ttlMs'] > 0 &&
    (g['queuedMs'] === undefined || (typeof g['queuedMs'] === 'number' && g['queuedMs'] >= 0)) &&
    (g['roundTripMs'] === undefined ||
      (typeof g['roundTripMs'] === 'number' && Number.isFinite(g['roundTripMs']) && g['roundTripMs'] >= 0))
  );
}
