import type { Clock } from '@dlock/core';
import { TransportError } from '@dlock/core';
import { type Standing, unlessAborted, WakeSignal } from '@dlock/core/adapter';
import type { EtcdReleaseWatch, WatchSpec } from './etcd-release-watch.js';
import type { EtcdSession, KeepAliveOutcome, TrackedLease } from './etcd-session.js';

/** A queued claim re-reads its position this often even without a watch event, in case the watch broke silently. */
export const POLL_FLOOR_MS = 5_000;
/** Pause before re-reading after a failed re-read, so an unreachable etcd is not hammered. */
export const RETRY_PAUSE_MS = 100;

export const GONE = { kind: 'gone' } as const;
export const PAUSE = { kind: 'behind', wait: { pauseMs: RETRY_PAUSE_MS } } as const;

/** What a claim of either driver has: its call's times, the lease its queue key is on, and how its turn went. */
export interface QueueClaim {
  readonly request: { readonly ttlMs: number; readonly waitMs: number; readonly signal: AbortSignal };
  /** When the acquire call began, and when its wait ends (monotonic ms). */
  readonly startedAt: number;
  readonly deadline: number;
  /** The lease the queue key is written with; unset until the lease is granted or the session open. */
  lease: TrackedLease | undefined;
  /** Until when (monotonic ms) a write of the claim may still land (see `Writer`). */
  writingUntil: number;
  /** Queued, keeping its lease alive. */
  waiting: boolean;
  /** Set once granted: the grant's ownership token. */
  token: string | undefined;
  /** Round trip of the last request that decided this claim's turn (a write, or a re-read), in ms. */
  roundTripMs: number;
}

/** The fields of a new claim of `request` that every driver sets alike. */
export function newClaim<Q extends QueueClaim['request']>(
  request: Q,
  startedAt: number,
): QueueClaim & { readonly request: Q } {
  return {
    request,
    startedAt,
    deadline: startedAt + request.waitMs,
    lease: undefined,
    writingUntil: 0,
    waiting: false,
    token: undefined,
    roundTripMs: 0,
  };
}

/**
 * How a driver's claims wait for their turn: a queued claim keeps its lease alive, and sleeps until a notice, a poll
 * or the loss of its lease.
 */
export class Waits {
  readonly #session: EtcdSession;
  readonly #clock: Clock;
  readonly #watch: EtcdReleaseWatch;

  constructor(session: EtcdSession, clock: Clock, watch: EtcdReleaseWatch) {
    this.#session = session;
    this.#clock = clock;
    this.#watch = watch;
  }

  /** Queued: the lease is kept alive while the claim waits (nobody else renews a lease that holds no grant). */
  behind<W>(claim: QueueClaim, wait: W): Standing<W> {
    if (!claim.waiting && claim.lease) {
      claim.waiting = true;
      this.#session.addWaiter(claim.lease);
    }
    return { kind: 'behind', wait };
  }

  stop(claim: QueueClaim): void {
    if (!claim.waiting || !claim.lease) return;
    claim.waiting = false;
    this.#session.removeWaiter(claim.lease);
  }

  /**
   * Whether a re-check may trust the claim's lease without a keep-alive: at least half its TTL left, and enough to
   * promise the whole TTL asked for counted from the call's start.
   */
  isFresh(claim: QueueClaim, lease: TrackedLease, at: number): boolean {
    return (
      lease.expiresAt - at >= lease.ttlMs / 2 && lease.expiresAt - claim.startedAt >= claim.request.ttlMs
    );
  }

  /** A keep-alive of the lease to send beside a re-check, unless it is fresh; an error is an unknown outcome. */
  keepAliveUnlessFresh(
    claim: QueueClaim,
    lease: TrackedLease,
    at: number,
  ): Promise<KeepAliveOutcome | Error> {
    if (this.isFresh(claim, lease, at)) return Promise.resolve({ alive: true, sentAt: lease.confirmedAt });
    return this.#session.keepAlive(lease, at).catch(asError);
  }

  /**
   * A watch for {@link sleep}: notifies on a delete in the range from `spec.startRevision` (after `onDelete` hears
   * the first deleted key) or when the watch resets, as a missed delete must be assumed then.
   */
  deletes(spec: WatchSpec, onDelete?: (key: Buffer) => void): (notify: () => void) => () => void {
    return (notify) =>
      this.#watch.watch(spec, {
        onDeletes: (events) => {
          onDelete?.(events[0]?.kv.key ?? Buffer.alloc(0));
          notify();
        },
        onReset: notify,
      });
  }

  /**
   * Sleeps until `watch` notifies, the poll floor (or `pauseMs`) or `ms` passes, or the lease is lost: GONE then.
   * The watch is set after the lease's loss is listened for, and both are removed before returning.
   */
  async sleep(
    lease: TrackedLease,
    options: {
      readonly ms: number;
      readonly signal: AbortSignal;
      readonly pauseMs: number | undefined;
      readonly watch: ((notify: () => void) => () => void) | undefined;
    },
  ): Promise<typeof GONE | undefined> {
    const lost = lease.lost.signal;
    if (lost.aborted) return GONE;
    const wake = new WakeSignal();
    const notify = (): void => wake.notify();
    lost.addEventListener('abort', notify, { once: true });
    const unwatch = options.watch ? options.watch(notify) : () => {};
    const poll = options.pauseMs ?? Math.max(POLL_FLOOR_MS, 2 * lease.ttlMs);
    try {
      await wake.wait(this.#clock, Math.min(options.ms, poll), options.signal);
    } finally {
      unwatch();
      lost.removeEventListener('abort', notify);
    }
    return lost.aborted ? GONE : undefined;
  }
}

/** The lease of a claim core checks or waits on: enqueue set it before saying the claim was queued. */
export function leaseOf(claim: { readonly lease: TrackedLease | undefined }): TrackedLease {
  if (!claim.lease) throw new TransportError('etcd: a claim was checked before it was written');
  return claim.lease;
}

/**
 * The outcome of the keep-alive sent beside an enqueue write (session mode), once the write is back; an error
 * stands for an unknown outcome. Settles as soon as `signal` aborts.
 */
export async function refreshed(
  refresh: Promise<KeepAliveOutcome> | undefined,
  signal: AbortSignal,
): Promise<KeepAliveOutcome | Error | undefined> {
  return refresh ? unlessAborted(refresh.catch(asError), signal) : undefined;
}

export function asError(value: unknown): Error {
  return value instanceof Error ? value : new TransportError(String(value));
}
