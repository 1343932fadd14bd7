import { boundedCall, type CallDeadlines } from './bounded-call.js';
import type { Clock } from './clock.js';
import { isDLockError, type LostReason, TransportError, textOf } from './errors.js';
import { handleEventBase, type LockEvents } from './events.js';
import type { Handle } from './handle.js';
import { LinkedSet } from './linked-set.js';
import type { LockService, RenewRequest, RenewResult } from './service.js';
import { jitter, renewIntervalMs, renewRetryDelayMs, validUntil } from './timing.js';

const DISARMED = Symbol('disarmed');

export interface RenewalSchedulerDeps {
  readonly clock: Clock;
  readonly deadlines: CallDeadlines;
  readonly service: LockService;
  readonly events: LockEvents;
  readonly driftFactor: number;
  /** Consecutive transport failures that make a handle Lost while its window is open; Infinity: only the window. */
  readonly renewFailBudget: number;
  readonly operationTimeoutMs: number;
  /** Moves a handle to Lost and runs its callbacks. */
  readonly lose: (handle: Handle, reason: LostReason, error: unknown) => void;
}

/**
 * One timer for every handle of a client, however many (10,000 handles are 10,000 entries, not 10,000 timers).
 * Each tick first declares Lost every handle whose validity window has closed — without asking the service, so a
 * process resuming from a pause learns it at once — then renews everything due soon in one batch (`renewMany`
 * when the service has it). A handle stays held until its window closes, also while a renewal is in flight, and a
 * renewal that fails is retried inside the window: loss is judged against the window, not against a count of
 * failures or a guess at the next round trip.
 */
export class RenewalScheduler {
  readonly #deps: RenewalSchedulerDeps;
  readonly #handles = new LinkedSet<Handle>((handle) => handle.renewalLink);
  #timer: AbortController | undefined;
  #timerDueAt = Number.POSITIVE_INFINITY;
  #stopped = false;
  #pokeQueued = false;

  constructor(deps: RenewalSchedulerDeps) {
    this.#deps = deps;
  }

  get size(): number {
    return this.#handles.size;
  }

  add(handle: Handle): void {
    if (this.#stopped) return;
    this.#handles.add(handle);
    // A timer due no later than this handle's first wake covers it, and nothing changed for the others: no need to
    // look at every handle (this runs on every acquire).
    if (this.#timer && this.#timerDueAt <= this.#nextWake(handle)) return;
    this.#arm();
  }

  /** Called synchronously at the start of release, so no renewal can be sent for a handle being released. */
  remove(handle: Handle): void {
    // The timer stays armed: it is unref'd, and when it fires with nothing to do it simply stops. Disarming here
    // would cost a timer per acquire/release cycle.
    this.#handles.delete(handle);
  }

  /** Runs a tick soon, e.g. when `isHeld()` noticed a passed deadline before the timer fired. */
  poke(): void {
    if (this.#pokeQueued) return;
    this.#pokeQueued = true;
    queueMicrotask(() => {
      this.#pokeQueued = false;
      this.#tick();
    });
  }

  /**
   * Stops renewing. Leases granted for their TTL (`renew: false`) stay, only so that they end as lost when their
   * window closes; the timer that watches them is unref'd.
   */
  stop(): void {
    this.#stopped = true;
    for (const handle of this.#handles.values()) if (handle.renews) this.#handles.delete(handle);
    this.#disarm();
    this.#arm();
  }

  /**
   * Renews one handle now (manual `renew()`, a reentrant acquire), outside the batch. `ttlMs`: the TTL to ask for,
   * if not the handle's own (a reentrant acquire that asked for more); granted, it becomes the handle's.
   * `counted`: false for a reentrant acquire's renewal, whose transport failure is that acquire's alone: its retries
   * must not spend the `renewFailBudget` of the holders already sharing the handle. `settleBy`: the monotonic time
   * the caller's bound ends, which a renewal that first had to wait for another must not outlast.
   *
   * One renewal per lease is in flight at a time. Two at once could be applied by the service in one order and
   * answered in the other, and the window kept here would then come from an answer the service overrode (a short
   * renewal applied after a long one, answered first). A renewal already asking for enough is joined; one asking
   * for less (a reentrant acquire wants more) is waited for, and this one goes out after its answer.
   */
  async renewOne(
    handle: Handle,
    ttlMs?: number,
    counted = true,
    settleBy = Number.POSITIVE_INFINITY,
  ): Promise<boolean> {
    while (handle.renewal !== undefined) {
      const { renewal, renewalIndex } = handle;
      if (handle.renewalTtlMs >= (ttlMs ?? handle.ttlMs)) {
        // Its failure is this call's too: a renew() joining a reentrant acquire's renewal spends the budget.
        if (counted) handle.renewalCounted = true;
        return outcomeOf((await this.#within(renewal, settleBy))[renewalIndex]);
      }
      await this.#within(renewal, settleBy);
    }
    if (handle.state !== 'held') return false;
    if (this.#deps.clock.monotonic() >= settleBy) {
      throw new TransportError('renew: the renewal in flight before it took all of the time left');
    }
    // Never less than the handle's own TTL: its other holders asked for that, and it may have grown while waiting.
    const wanted = Math.max(ttlMs ?? handle.ttlMs, handle.ttlMs);
    return outcomeOf((await this.#renewBatch([handle], [wanted], counted, settleBy))[0]);
  }

  /**
   * A renewal another call sent, awaited no longer than this call's bound: that renewal's own bound (another
   * acquire's, with a longer wait) may end later.
   */
  async #within<T>(renewal: Promise<T>, settleBy: number): Promise<T> {
    if (settleBy === Number.POSITIVE_INFINITY) return renewal;
    const { clock } = this.#deps;
    const timer = new AbortController();
    try {
      return await Promise.race([
        renewal,
        clock.sleep(Math.max(0, settleBy - clock.monotonic()), timer.signal, { unref: true }).then(() => {
          throw new TransportError('renew: the renewal in flight before it took all of the time left');
        }),
      ]);
    } finally {
      timer.abort();
    }
  }

  #nextWake(handle: Handle): number {
    return handle.renewal !== undefined || !handle.renews
      ? handle.expiresAt
      : Math.min(handle.expiresAt, handle.renewDueAt);
  }

  #arm(): void {
    let next = Number.POSITIVE_INFINITY;
    this.#handles.forEach((handle) => {
      next = Math.min(next, this.#nextWake(handle));
    });
    if (next === Number.POSITIVE_INFINITY) {
      this.#disarm();
      return;
    }
    if (this.#timer && this.#timerDueAt <= next) return;
    this.#disarm();
    const controller = new AbortController();
    this.#timer = controller;
    this.#timerDueAt = next;
    const delay = Math.max(0, next - this.#deps.clock.monotonic());
    this.#deps.clock.sleep(delay, controller.signal, { unref: true }).then(
      () => {
        if (this.#timer !== controller) return;
        this.#timer = undefined;
        this.#timerDueAt = Number.POSITIVE_INFINITY;
        this.#tick();
      },
      () => {},
    );
  }

  #disarm(): void {
    this.#timer?.abort(DISARMED);
    this.#timer = undefined;
    this.#timerDueAt = Number.POSITIVE_INFINITY;
  }

  #tick(): void {
    const now = this.#deps.clock.monotonic();
    const batch: Handle[] = [];
    for (const handle of this.#handles.values()) {
      if (handle.state !== 'held') {
        this.#handles.delete(handle);
        continue;
      }
      if (now >= handle.expiresAt) {
        this.#handles.delete(handle);
        this.#loseClosed(handle);
        continue;
      }
      // Renewals due within a fifth of their interval go now, together: renewing a little early costs nothing,
      // and it turns many nearly-simultaneous renewals into one round trip.
      if (
        handle.renews &&
        !this.#stopped &&
        handle.renewal === undefined &&
        handle.renewDueAt - now <= renewIntervalMs(Math.min(handle.ttlMs, handle.unsureTtlMs)) / 5
      )
        batch.push(handle);
    }
    if (batch.length > 0) {
      // #renewBatch handles every failure itself; this catch only keeps a bug from becoming an unhandled rejection.
      this.#renewBatch(batch).catch((error: unknown) => {
        process.emitWarning(`dlock: renewal batch failed unexpectedly: ${textOf(error)}`, 'DLockWarning');
      });
    }
    this.#arm();
  }

  /** Renews handles in one round trip; resolves per handle to true, false (refused) or the transport error. */
  #renewBatch(
    handles: readonly Handle[],
    ttls?: readonly number[],
    counted = true,
    settleBy = Number.POSITIVE_INFINITY,
  ): Promise<(boolean | Error)[]> {
    const requests: RenewRequest[] = handles.map((h, i) => ({ lease: h.lease, ttlMs: ttls?.[i] ?? h.ttlMs }));
    const done = this.#sendBatch(handles, requests, settleBy);
    for (let i = 0; i < handles.length; i += 1) {
      const handle = handles[i]!;
      handle.renewal = done;
      handle.renewalIndex = i;
      handle.renewalTtlMs = requests[i]!.ttlMs;
      handle.renewalCounted = counted;
    }
    return done;
  }

  async #sendBatch(
    handles: readonly Handle[],
    requests: readonly RenewRequest[],
    settleBy: number,
  ): Promise<(boolean | Error)[]> {
    const { clock, service, operationTimeoutMs } = this.#deps;
    const sentAt = clock.monotonic();
    // An answer after the last of these windows closes is of no use to any of them: wait no longer than that. Not
    // the first: a handle about to close (its service cut off) must not cut short the wait for the others' answers
    // — a Redis Cluster answers per master — and the tick loses it at its window's end whatever is in flight.
    let closesIn = 0;
    for (const handle of handles) closesIn = Math.max(closesIn, handle.expiresAt - sentAt);
    let results: readonly RenewResult[] | Error;
    try {
      results = await boundedCall(
        () => {
          if (service.renewMany && requests.length > 1) return service.renewMany(requests);
          return Promise.all(requests.map((request) => service.renew(request)));
        },
        {
          deadlines: this.#deps.deadlines,
          clock,
          timeoutMs: Math.max(1, Math.min(operationTimeoutMs, closesIn, settleBy - sentAt)),
          what: 'renew',
        },
      );
      if (!Array.isArray(results) || results.length !== requests.length) {
        results = new TransportError(
          `renew answered ${String(results?.length)} results for ${requests.length} leases`,
        );
      }
    } catch (error) {
      results = isDLockError(error) ? error : new TransportError(textOf(error), { cause: error });
    }
    // Read before the flags go: a renew() that joined may have made the renewal counted.
    const counted = handles.map((handle) => handle.renewalCounted);
    // All of them first: one bad result must not leave the others marked in flight for ever.
    for (const handle of handles) handle.renewal = undefined;
    const outcomes = handles.map((handle, i) =>
      this.#apply(
        handle,
        results instanceof Error ? results : validResult(results[i]),
        sentAt,
        requests[i]!.ttlMs,
        counted[i]!,
      ),
    );
    this.#arm();
    return outcomes;
  }

  /** The window closed: `unreachable` if the renewals meant to extend it failed, `expired` otherwise (a pause). */
  #loseClosed(handle: Handle): void {
    // A renewal still unanswered when the window closes is "too slow", which is `expired` like a pause: only
    // renewals that failed outright make it `unreachable`.
    const error = handle.lastRenewError;
    this.#deps.lose(handle, error === undefined ? 'expired' : 'unreachable', error);
  }

  #apply(
    handle: Handle,
    result: RenewResult | Error | undefined,
    sentAt: number,
    requestedTtlMs: number,
    counted: boolean,
  ): boolean | Error {
    const { clock, driftFactor, renewFailBudget, events, lose } = this.#deps;
    if (handle.state !== 'held') return false;
    const now = clock.monotonic();
    if (result === undefined || result instanceof Error) {
      const error = result ?? new TransportError('renew returned no result');
      // Not answered is not unsent: the service may still apply it, after a later renewal that asks for more.
      handle.unsureTtlMs = Math.min(handle.unsureTtlMs, requestedTtlMs);
      if (now >= handle.expiresAt) {
        // No usable answer before the window closed (a renewal bounded by the window timed out): that is "too
        // slow", judged like any closed window by what happened before it.
        this.#handles.delete(handle);
        this.#loseClosed(handle);
        return error;
      }
      if (!counted) return error;
      handle.renewFailures += 1;
      handle.lastRenewError = error;
      events.emit('renew-failed', {
        ...handleEventBase(handle, now),
        failures: handle.renewFailures,
        error,
      });
      if (handle.renewFailures >= renewFailBudget) {
        this.#handles.delete(handle);
        lose(handle, 'unreachable', error);
      } else {
        handle.renewDueAt =
          now + jitter(renewRetryDelayMs(handle.ttlMs, handle.expiresAt - now), () => clock.random());
      }
      return error;
    }
    if (!result.renewed) {
      this.#handles.delete(handle);
      lose(handle, 'rejected', undefined);
      return false;
    }
    if (now >= handle.expiresAt) {
      // The answer came after the window closed (a pause, or a round trip longer than what was left): for the time
      // in between this process believed nothing, and `isHeld()` said false. A late yes cannot vouch for that gap.
      this.#handles.delete(handle);
      this.#loseClosed(handle);
      return false;
    }
    handle.renewFailures = 0;
    handle.lastRenewError = undefined;
    const granted =
      result.ttlMs !== undefined && Number.isFinite(result.ttlMs) && result.ttlMs > 0
        ? result.ttlMs
        : requestedTtlMs;
    handle.ttlMs = granted;
    // A shorter renewal that failed here may be applied after this one, and would end the lease that much sooner:
    // applied later than this one, it still counts from after sentAt. So the window is the shorter of the two.
    const certainTtlMs = Math.min(granted, handle.unsureTtlMs);
    // The service confirmed ownership at some instant after sentAt, so the new window counts from sentAt.
    handle.expiresAt = Math.max(handle.expiresAt, validUntil(sentAt, certainTtlMs, driftFactor));
    handle.renewDueAt = sentAt + jitter(renewIntervalMs(certainTtlMs), () => clock.random());
    // Every held handle renews every TTL/3: build the event only for a listener (most clients have none).
    if (events.listens('renewed')) {
      events.emit('renewed', {
        ...handleEventBase(handle, now),
        expiresAt: handle.expiresAt,
        latencyMs: now - sentAt,
      });
    }
    return true;
  }
}

/** A renewal's outcome as `renewOne` reports it: a transport error is thrown. */
function outcomeOf(outcome: boolean | Error | undefined): boolean {
  if (outcome instanceof Error) throw outcome;
  return outcome === true;
}

/** A result slot of a renewal batch, or a TransportError for that lease when the service answered nonsense there. */
function validResult(result: unknown): RenewResult | Error {
  if (typeof result === 'object' && result !== null && typeof (result as RenewResult).renewed === 'boolean') {
    return result as RenewResult;
  }
  return new TransportError(`renew answered ${textOf(result)} for a lease`);
}
