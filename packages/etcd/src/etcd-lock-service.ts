import { setMaxListeners } from 'node:events';
import type {
  AcquireRequest,
  AcquireResult,
  Lease,
  LockService,
  RenewRequest,
  RenewResult,
} from '@dlock/core';
import { type Clock, systemClock, TransportError } from '@dlock/core';
import { BackgroundRetries } from '@dlock/core/adapter';
import type { EtcdClientLike, KeyValueLike, RequestOpLike, TxnResponseLike } from './client-like.js';
import { EtcdServiceClosedError, isLeaseNotFound, transportError } from './errors.js';
import { EtcdReleaseWatch } from './etcd-release-watch.js';
import { EtcdSession, type KeepAliveOutcome, type TrackedLease } from './etcd-session.js';
import { contenderKey, lockDirectory, newOwnershipToken, newServiceId, prefixRangeEnd } from './keys.js';
import { type EtcdLockServiceOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { EtcdRequests, unlessAborted } from './requests.js';
import { Slots } from './slots.js';

/** A lock this service holds: what `renew` and `release` check a core `Lease` against. */
interface HeldLock {
  readonly name: string;
  readonly slot: number;
  readonly key: Buffer;
  readonly revision: bigint;
  readonly lease: TrackedLease;
}

/** One acquire attempt's place in a lock's queue. */
interface Contender {
  readonly name: string;
  readonly slot: number;
  readonly directory: Buffer;
  readonly rangeEnd: Buffer;
  readonly key: Buffer;
  readonly lease: TrackedLease;
  /** Create revision of `key`; 0 while unknown (not written yet, or the write's outcome was lost). */
  revision: bigint;
  /** Round trip of the last request that decided this contender's turn (its write, or a re-read), in ms. */
  roundTripMs: number;
}

type Turn =
  | { readonly kind: 'held' }
  | { readonly kind: 'busy' }
  /** The contender's lease vanished while it queued (expired, revoked, or its key was deleted). */
  | { readonly kind: 'lease-lost' }
  /** Our slot's key was already there, left over from an earlier attempt: removed, so try again. */
  | { readonly kind: 'stale' };

/** What one re-read of a contender's position found. */
interface Position {
  /** Our key still exists with our create revision. */
  readonly ownKey: boolean;
  /** The key just before ours, if any. */
  readonly predecessor: Buffer | undefined;
  /** The revision the read saw; a watch from the next one misses nothing. */
  readonly revision: bigint;
  readonly keepAlive: KeepAliveOutcome | Error;
}

type Wake = 'deleted' | 'reset' | 'poll' | 'deadline' | 'abort' | 'lost';

/** A queued contender re-reads its position this often even without a watch event, in case the watch broke silently. */
const POLL_FLOOR_MS = 5_000;
/** Pause before re-reading after a failed re-read, so an unreachable etcd is not hammered. */
const RETRY_PAUSE_MS = 100;
/** Fresh starts per acquire call (a lease lost while queued, a stale key); more means something keeps interfering. */
const MAX_RESTARTS = 5;
/**
 * Bound of one try to take an abandoned contender's key back. The request leaves at once, and etcd applies it even
 * if its answer is lost; a try that waited out the whole request timeout for that answer would only hold up the next.
 */
const UNDO_TRY_MS = 1_000;
/**
 * How long a session's key that could not be deleted is retried: it would block its lock for as long as the session
 * lives (the other locks keep it alive), so for longer than any lease; tries stop once the session is lost.
 */
const SESSION_CLEANUP_MS = 30_000;

const byCreate = (directory: Buffer, rangeEnd: Buffer, order: 'Ascend' | 'Descend', limit: number) => ({
  request_range: {
    key: directory,
    range_end: rangeEnd,
    sort_target: 'Create' as const,
    sort_order: order,
    limit,
    keys_only: true,
  },
});

const rangeKvs = (response: TxnResponseLike, index: number): readonly KeyValueLike[] =>
  response.responses[index]?.response_range?.kvs ?? [];

/**
 * A {@link LockService} on etcd, with the queue of etcd's own `concurrency.Mutex`: each contender writes a key under
 * the lock's directory, attached to its lease; the key with the lowest create revision holds the lock; every other
 * contender watches only the key just before its own, so a release wakes exactly one waiter, in FIFO order.
 *
 * - Fencing token: the holder key's create revision, cluster-wide and strictly increasing.
 * - TTL: the lease TTL, rounded up to whole seconds (etcd also raises it to its minimum, 2 s by default). The grant
 *   reports the TTL granted and, after a wait, when it last restarted (`queuedMs`): see `validity` below.
 * - Renew: one keep-alive round trip with a deadline; a lease etcd no longer knows → `renewed: false`.
 * - Release: a lease per lock is revoked (which deletes its key in the same raft entry); in session mode the key
 *   is deleted if its create revision still matches.
 *
 * @example
 * ```ts
 * const etcd = new Etcd3({ hosts: '127.0.0.1:2379' });
 * const locks = new LockClient(new EtcdLockService({ client: etcd, session: true }));
 * await using lock = await locks.acquire('invoice:42', { ttlMs: 10_000, waitMs: 5_000 });
 * await db.write(invoice, { fencingToken: lock.fencingToken });
 * ```
 */
export class EtcdLockService implements LockService {
  readonly #options: ResolvedOptions;
  readonly #client: EtcdClientLike;
  readonly #clock: Clock;
  readonly #requests: EtcdRequests;
  readonly #leases: EtcdSession;
  readonly #watches: EtcdReleaseWatch;
  readonly #cleanups: BackgroundRetries;
  readonly #held = new Map<string, HeldLock>();
  readonly #slots = new Slots();
  readonly #serviceId = newServiceId();
  readonly #leaseListeners = new Set<(ownershipTokens: readonly string[]) => void>();
  readonly #closing = new AbortController();
  readonly #undoTryMs: number;
  #closed: Promise<void> | undefined;
  /** The newest store revision a response showed us, and when: a watch started soon after begins there. */
  #seen = { revision: 0n, at: Number.NEGATIVE_INFINITY };

  constructor(options: EtcdLockServiceOptions) {
    this.#options = resolveOptions(options);
    this.#client = this.#options.client;
    const timeout = this.#options.requestTimeoutMs;
    this.#undoTryMs = Math.min(timeout, UNDO_TRY_MS);
    this.#clock = this.#options.clock ?? systemClock;
    this.#requests = new EtcdRequests(this.#clock, timeout);
    this.#cleanups = new BackgroundRetries(this.#clock);
    this.#leases = new EtcdSession(
      this.#client.leaseClient,
      this.#requests,
      this.#options.sessionTtlMs,
      (tokens) => this.#sessionLost(tokens),
    );
    this.#watches = new EtcdReleaseWatch(this.#client.watchClient, this.#requests);
    // Every queued contender listens for close: hundreds are normal, not a leak.
    setMaxListeners(0, this.#closing.signal);
  }

  /** True in session mode (locks share a lease). */
  get sessionMode(): boolean {
    return this.#options.sessionTtlMs !== undefined;
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    const startedAt = this.#clock.monotonic();
    const deadline = startedAt + request.waitMs;
    const directory = lockDirectory(this.#options.prefix, request.name);
    const rangeEnd = prefixRangeEnd(directory);
    const owner = Buffer.from(request.ownerId, 'utf8');
    for (let restart = 0; ; restart++) {
      this.#throwIfAborted(request.signal);
      const { lease, refresh } = await this.#leases.forAcquire(request.ttlMs, startedAt, request.signal);
      const slot = this.#slots.take(request.name);
      const contender: Contender = {
        name: request.name,
        slot,
        directory,
        rangeEnd,
        key: contenderKey(directory, this.#serviceId, slot),
        lease,
        revision: 0n,
        roundTripMs: 0,
      };
      let turn: Turn;
      try {
        turn = await this.#contend(contender, owner, refresh, request, startedAt, deadline);
      } catch (error) {
        // Also when core gave up on this call (the signal aborted): a write whose answer is lost may have landed,
        // and our key must leave the queue now, not when the request's own deadline passes.
        await this.#leave(contender);
        throw error;
      }
      if (turn.kind === 'held' && this.#closing.signal.aborted) {
        // close() ran while we were contending: it has already given up the locks it knew of, so this one must
        // not outlive it either.
        await this.#leave(contender);
        throw this.#closing.signal.reason;
      }
      if (turn.kind === 'held' && !lease.isLost) {
        const token = newOwnershipToken();
        this.#held.set(token, {
          name: request.name,
          slot,
          key: contender.key,
          revision: contender.revision,
          lease,
        });
        lease.grants.add(token);
        return {
          acquired: true,
          grant: {
            ownershipToken: token,
            fencingToken: contender.revision,
            ...validity(lease, startedAt),
            // The validity anchor stays at the lease's send (its TTL started there), often a round trip earlier.
            roundTripMs: contender.roundTripMs,
          },
        };
      }
      if (turn.kind === 'busy') return { acquired: false };
      // Lost our lease while queued (its key went with it), held on a lease lost just now, or met a stale key of
      // our own: clean up and start over. Not contention, so even a no-wait acquire gets its one real attempt; a
      // restart past the deadline makes one attempt and leaves.
      await this.#leave(contender);
      if (restart + 1 >= MAX_RESTARTS) return { acquired: false };
    }
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    const held = this.#lookup(request.lease);
    if (!held) return { renewed: false };
    if (held.lease.isLost) {
      this.#drop(request.lease.ownershipToken, held);
      return { renewed: false };
    }
    const calledAt = this.#clock.monotonic();
    // A session keep-alive sent at most a sixth of the TTL ago answers for every lock on the session: this is
    // what makes 1,000 locks cost one keep-alive per renewal interval. The TTL reported counts from this call,
    // so core's validity never extends past what that keep-alive proved.
    const notBefore = held.lease.session ? calledAt - held.lease.ttlMs / 6 : calledAt;
    const outcome = await this.#leases.keepAlive(held.lease, notBefore);
    if (!outcome.alive) {
      this.#drop(request.lease.ownershipToken, held);
      return { renewed: false };
    }
    if (this.#held.get(request.lease.ownershipToken) !== held) return { renewed: false };
    return { renewed: true, ttlMs: Math.floor(outcome.sentAt + held.lease.ttlMs - calledAt) };
  }

  /** Concurrent renewals of locks on one lease share one keep-alive, so a batch costs one per distinct lease. */
  renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return Promise.all(requests.map((request) => this.renew(request)));
  }

  async release(lease: Lease): Promise<boolean> {
    const held = this.#lookup(lease);
    if (!held) return false;
    this.#forget(lease.ownershipToken, held);
    try {
      if (!held.lease.session) return await this.#leases.revoke(held.lease);
      try {
        const response = await this.#deleteKey(held.key, held.revision);
        return response.succeeded && response.responses[0]?.response_delete_range?.deleted !== '0';
      } catch (error) {
        // The session lease lives on with the other locks: without a retry this lock would stay taken with it.
        this.#retryDelete(held.key, held.revision, held.lease);
        throw error;
      }
    } finally {
      // Only now, once the delete has settled: a new contender in this slot must not race our own delete. If the
      // key survived, whoever takes the slot next finds it and removes it (see #enqueue).
      this.#slots.free(held.name, held.slot);
    }
  }

  /**
   * Watches the lock's directory for deletes. Creating a watch takes a round trip; so that a release in that
   * window is not missed, the watch starts just after the newest revision this service has seen, if it saw one
   * within the last second (an older start would replay history for nothing).
   */
  watch(name: string, onReleased: () => void): () => void {
    if (this.#closing.signal.aborted) return () => {};
    const directory = lockDirectory(this.#options.prefix, name);
    const recent = this.#clock.monotonic() - this.#seen.at < 1_000;
    return this.#watches.watch(
      {
        key: directory,
        rangeEnd: prefixRangeEnd(directory),
        ...(recent ? { startRevision: this.#seen.revision + 1n } : {}),
      },
      { onDeletes: () => onReleased() },
    );
  }

  watchLeases(onLost: (ownershipTokens: readonly string[]) => void): () => void {
    const listener = (tokens: readonly string[]): void => onLost(tokens);
    this.#leaseListeners.add(listener);
    return () => {
      this.#leaseListeners.delete(listener);
    };
  }

  /**
   * Gives up every lock this service holds (revoking its leases, bounded by `requestTimeoutMs`), ends pending
   * acquires, closes its streams. Idempotent. Does not close the `etcd3` client, which the caller owns. Acquires
   * after (or ended by) close reject with a `ClientClosedError` (code `CLIENT_CLOSED`).
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** `await using service = new EtcdLockService(...)`: the same as {@link close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #close(): Promise<void> {
    this.#closing.abort(new EtcdServiceClosedError());
    this.#watches.close();
    await this.#cleanups.close();
    const ownLeases = new Set([...this.#held.values()].map((h) => h.lease).filter((l) => !l.session));
    this.#held.clear();
    await Promise.allSettled([...ownLeases].map((lease) => this.#leases.revoke(lease)));
    await this.#leases.close();
  }

  #assertOpen(): void {
    if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
  }

  #throwIfAborted(signal: AbortSignal): void {
    if (signal.aborted) throw signal.reason;
    this.#assertOpen();
  }

  #lookup(lease: Lease): HeldLock | undefined {
    const held = this.#held.get(lease.ownershipToken);
    if (!held || held.name !== lease.name || held.revision !== lease.fencingToken) return undefined;
    return held;
  }

  /** Drops a grant from the registry (no more renewals). Its slot is freed by whoever removes its key. */
  #forget(token: string, held: HeldLock): void {
    if (this.#held.get(token) === held) this.#held.delete(token);
    held.lease.grants.delete(token);
  }

  /** A grant whose lease etcd no longer knows: its key is gone with the lease, so its slot is free again. */
  #drop(token: string, held: HeldLock): void {
    if (this.#held.get(token) !== held) return;
    this.#forget(token, held);
    this.#slots.free(held.name, held.slot);
  }

  #saw(response: TxnResponseLike): void {
    const revision = BigInt(response.header.revision);
    if (revision >= this.#seen.revision) this.#seen = { revision, at: this.#clock.monotonic() };
  }

  #sessionLost(tokens: readonly string[]): void {
    for (const token of tokens) {
      const held = this.#held.get(token);
      if (!held) continue;
      this.#held.delete(token);
      this.#slots.free(held.name, held.slot);
    }
    if (tokens.length === 0) return;
    for (const listener of [...this.#leaseListeners]) {
      try {
        listener(tokens);
      } catch {
        // a listener's failure must not keep the others from hearing it
      }
    }
  }

  async #contend(
    contender: Contender,
    owner: Buffer,
    refresh: Promise<KeepAliveOutcome> | undefined,
    request: AcquireRequest,
    startedAt: number,
    deadline: number,
  ): Promise<Turn> {
    const { signal } = request;
    let enqueued: { response: TxnResponseLike; free: boolean; stale: boolean; sentAt: number };
    try {
      enqueued = await this.#enqueue(contender, owner, signal);
    } catch (error) {
      // Not awaited: a refresh whose answer is lost must not hold up taking our key back.
      refresh?.catch(() => undefined);
      if (isLeaseNotFound(error)) {
        this.#leases.markLost(contender.lease);
        return { kind: 'lease-lost' };
      }
      throw error;
    }
    const { response, free, stale, sentAt } = enqueued;
    if (stale) {
      if (refresh)
        await unlessAborted(
          refresh.catch(() => undefined),
          signal,
        );
      return { kind: 'stale' };
    }
    const refreshed = refresh
      ? await unlessAborted(
          refresh.catch((error: unknown) => asError(error)),
          signal,
        )
      : undefined;
    // The write and the refresh beside it decide a free lock: together, one round trip.
    contender.roundTripMs = this.#clock.monotonic() - sentAt;
    if (refreshed && !(refreshed instanceof Error) && !refreshed.alive) return { kind: 'lease-lost' };
    const mine = contender.revision;
    const holder = free ? undefined : rangeKvs(response, 3)[0];
    if (free || (holder && BigInt(holder.create_revision) === mine)) {
      if (refreshed instanceof Error || contender.lease.expiresAt - startedAt < request.ttlMs) {
        throw transportError(
          'session keep-alive',
          refreshed ?? new Error('session lease too close to expiry'),
        );
      }
      return { kind: 'held' };
    }
    this.#throwIfAborted(request.signal);
    if (this.#clock.monotonic() >= deadline) {
      await this.#leave(contender);
      return { kind: 'busy' };
    }
    // The write's own reads name the key just before ours (the newest but one), saving a request per waiter.
    const newest = rangeKvs(response, 4);
    const predecessor =
      newest[0] && BigInt(newest[0].create_revision) === mine && newest[1] ? newest[1].key : undefined;
    return this.#queue(
      contender,
      predecessor,
      BigInt(response.header.revision) + 1n,
      request,
      startedAt,
      deadline,
    );
  }

  /**
   * Writes our key, in one transaction whichever way it goes. If the lock's directory is empty (the comparison
   * over the whole range holds for no keys), the write alone makes us the holder: the uncontended path is one
   * put, as cheap as a bare put-if-absent. Otherwise the same transaction reads our key as it was before the write,
   * rewrites it, and reads the holder and the two newest keys (the second newest is the one a waiter watches).
   *
   * A key that was already there is stale: left by an attempt whose delete failed or whose outcome was lost (or
   * the first attempt of this very transaction, retried by the driver). Its create revision may be an old grant's
   * fencing token, so it is never adopted: `stale` makes the caller delete it and start over.
   */
  async #enqueue(
    contender: Contender,
    owner: Buffer,
    signal: AbortSignal,
  ): Promise<{ response: TxnResponseLike; free: boolean; stale: boolean; sentAt: number }> {
    const { key, directory, rangeEnd, lease } = contender;
    const put: RequestOpLike = { request_put: { key, value: owner, lease: lease.id } };
    const sentAt = this.#clock.monotonic();
    const response = await this.#requests.run(
      'acquire',
      (options) =>
        this.#client.kv.txn(
          {
            compare: [
              {
                key: directory,
                range_end: rangeEnd,
                target: 'Create',
                result: 'Equal',
                create_revision: '0',
              },
            ],
            success: [put],
            failure: [
              { request_range: { key, keys_only: true } },
              put,
              { request_range: { key, keys_only: true } },
              byCreate(directory, rangeEnd, 'Ascend', 1),
              byCreate(directory, rangeEnd, 'Descend', 2),
            ],
          },
          options,
        ),
      {
        // Answered after we gave up: the key exists now, and nobody would ever remove it from the queue.
        onLate: (late) => {
          const revision = late.succeeded ? late.header.revision : rangeKvs(late, 2)[0]?.create_revision;
          if (lease.session && revision) this.#retryDelete(key, BigInt(revision), lease);
        },
        signal,
      },
    );
    this.#saw(response);
    const own = response.succeeded ? response.header.revision : rangeKvs(response, 2)[0]?.create_revision;
    if (own === undefined) throw transportError('acquire', new Error('own key missing after write'));
    contender.revision = BigInt(own);
    const stale = !response.succeeded && rangeKvs(response, 0).length > 0;
    return { response, free: response.succeeded, stale, sentAt };
  }

  /** Waits for our turn: for the key just before ours to go, re-reading after each wake-up. */
  async #queue(
    contender: Contender,
    firstPredecessor: Buffer | undefined,
    firstRevision: bigint,
    request: AcquireRequest,
    startedAt: number,
    deadline: number,
  ): Promise<Turn> {
    const { lease } = contender;
    this.#leases.addWaiter(lease);
    try {
      let predecessor = firstPredecessor;
      let fromRevision = firstRevision;
      let pause = 0;
      for (;;) {
        if (predecessor !== undefined || pause > 0) {
          const wake = await this.#wait(
            contender,
            predecessor,
            fromRevision,
            pause,
            deadline,
            request.signal,
          );
          pause = 0;
          if (wake === 'deadline') {
            await this.#leave(contender);
            return { kind: 'busy' };
          }
          if (wake === 'abort')
            throw request.signal.aborted ? request.signal.reason : this.#closing.signal.reason;
          if (wake === 'lost') return { kind: 'lease-lost' };
        }
        let check: Position;
        try {
          check = await this.#recheck(contender, startedAt, request.ttlMs, request.signal);
        } catch (error) {
          this.#throwIfAborted(request.signal);
          if (this.#clock.monotonic() >= deadline) throw error;
          predecessor = undefined;
          pause = RETRY_PAUSE_MS;
          continue;
        }
        const alive = check.keepAlive instanceof Error ? undefined : check.keepAlive.alive;
        // etcd #11456: a waiter whose lease expired while it waited must not report Held. Its key is gone with
        // the lease, or the keep-alive says so.
        if (!check.ownKey || alive === false) return { kind: 'lease-lost' };
        if (check.predecessor) {
          predecessor = check.predecessor;
          fromRevision = check.revision + 1n;
          continue;
        }
        if (check.keepAlive instanceof Error) {
          // First in line, but the lease's remaining life is unconfirmed: ask again rather than guess.
          if (this.#clock.monotonic() >= deadline) throw check.keepAlive;
          predecessor = undefined;
          pause = RETRY_PAUSE_MS;
          continue;
        }
        this.#throwIfAborted(request.signal);
        return { kind: 'held' };
      }
    } finally {
      this.#leases.removeWaiter(lease);
    }
  }

  /**
   * Re-reads our key and the key just before it in one transaction. If we may be first and the lease's confirmed
   * life is getting short (the queue's keep-alive timer failing, or a session not refreshed since this acquire
   * began), a keep-alive goes in parallel: the grant's validity is computed from the lease's last confirmation,
   * never from a guess. Our key still existing and the lease confirmed recently together are the lease check
   * etcd's own mutex lacked (etcd #11456).
   */
  async #recheck(
    contender: Contender,
    startedAt: number,
    ttlMs: number,
    signal: AbortSignal,
  ): Promise<Position> {
    const { key, directory, rangeEnd, revision, lease } = contender;
    const at = this.#clock.monotonic();
    const fresh = lease.expiresAt - at >= lease.ttlMs / 2 && lease.expiresAt - startedAt >= ttlMs;
    const keepAlive: Promise<KeepAliveOutcome | Error> = fresh
      ? Promise.resolve({ alive: true, sentAt: lease.confirmedAt })
      : this.#leases.keepAlive(lease, at).catch((error: unknown) => asError(error));
    const predecessorOp: RequestOpLike = {
      request_range: {
        ...byCreate(directory, rangeEnd, 'Descend', 1).request_range,
        max_create_revision: String(revision - 1n),
      },
    };
    const response = await this.#requests.run(
      'acquire',
      (options) =>
        this.#client.kv.txn(
          { success: [{ request_range: { key, keys_only: true } }, predecessorOp] },
          options,
        ),
      { signal },
    );
    this.#saw(response);
    const own = rangeKvs(response, 0)[0];
    const confirmed = await unlessAborted(keepAlive, signal);
    // The re-read and the keep-alive beside it are what a grant after a wait rests on: one round trip.
    contender.roundTripMs = this.#clock.monotonic() - at;
    return {
      ownKey: own !== undefined && BigInt(own.create_revision) === revision,
      predecessor: rangeKvs(response, 1)[0]?.key,
      revision: BigInt(response.header.revision),
      keepAlive: confirmed,
    };
  }

  /**
   * Sleeps until the predecessor's key is deleted (watched from `fromRevision`, so a deletion between our read and
   * the watch is not missed), the watch resets, the poll interval or the deadline passes, the caller aborts, or
   * our lease is lost. With `pauseMs`, just sleeps that long (same exits).
   */
  #wait(
    contender: Contender,
    predecessor: Buffer | undefined,
    fromRevision: bigint,
    pauseMs: number,
    deadline: number,
    signal: AbortSignal,
  ): Promise<Wake> {
    return new Promise<Wake>((resolve) => {
      let done = false;
      const lost = contender.lease.lost.signal;
      const closing = this.#closing.signal;
      const finish = (wake: Wake): void => {
        if (done) return;
        done = true;
        timer.abort();
        unwatch();
        signal.removeEventListener('abort', onAbort);
        closing.removeEventListener('abort', onAbort);
        lost.removeEventListener('abort', onLost);
        resolve(wake);
      };
      const onAbort = (): void => finish('abort');
      const onLost = (): void => finish('lost');
      const unwatch =
        predecessor !== undefined && pauseMs === 0
          ? this.#watches.watch(
              { key: predecessor, startRevision: fromRevision },
              { onDeletes: () => finish('deleted'), onReset: () => finish('reset') },
            )
          : () => {};
      const poll = pauseMs > 0 ? pauseMs : Math.max(POLL_FLOOR_MS, 2 * contender.lease.ttlMs);
      const remaining = deadline - this.#clock.monotonic();
      // Not unref'd: the caller is awaiting this acquire, and it must settle.
      const timer = new AbortController();
      this.#clock.sleep(Math.max(0, Math.min(remaining, poll)), timer.signal).then(
        () => finish(remaining <= poll ? 'deadline' : 'poll'),
        () => {},
      );
      if (signal.aborted || closing.aborted) finish('abort');
      else if (lost.aborted) finish('lost');
      signal.addEventListener('abort', onAbort, { once: true });
      closing.addEventListener('abort', onAbort, { once: true });
      lost.addEventListener('abort', onLost, { once: true });
    });
  }

  /**
   * Leaves the queue, best effort and bounded: revokes a lease of its own (which deletes the key), or deletes the
   * key from a session, guarded by its create revision. One try is awaited, bounded by `#undoTryMs`; if its answer
   * does not come, tries go on in the background. Frees the slot either way: a key that survived is found
   * and removed by the next contender in the slot. With the revision unknown (the write's outcome was lost), the
   * slot is never reused by this service, so the unguarded deletes retried in the background can only hit that
   * write, should it land late.
   */
  async #leave(contender: Contender): Promise<void> {
    const { name, slot, key, lease } = contender;
    if (!lease.session) {
      // Nothing keeps the lease alive from here on: past one TTL (and a try) it has expired by itself.
      const until = this.#clock.monotonic() + lease.ttlMs + this.#undoTryMs;
      if (!(await this.#tryRevoke(lease)))
        this.#cleanups.run(() => this.#leases.revoke(lease, this.#undoTryMs), until);
      this.#slots.free(name, slot);
      return;
    }
    const revision = contender.revision > 0n ? contender.revision : undefined;
    try {
      await this.#deleteKey(key, revision, this.#undoTryMs);
      if (revision !== undefined) this.#slots.free(name, slot);
      else this.#retryDelete(key, undefined, lease);
    } catch {
      this.#retryDelete(key, revision, lease);
      if (revision !== undefined) this.#slots.free(name, slot);
    }
  }

  /**
   * Deletes our key, guarded by its create revision when known. Unguarded only for a slot retired for good (see
   * #leave): keys carry this service's random id, so no other service's key can be hit.
   */
  async #deleteKey(
    key: Buffer,
    revision: bigint | undefined,
    timeoutMs = this.#options.requestTimeoutMs,
  ): Promise<TxnResponseLike> {
    const response = await this.#requests.run(
      'release',
      (options) =>
        this.#client.kv.txn(
          {
            compare:
              revision === undefined
                ? []
                : [{ key, target: 'Create', result: 'Equal', create_revision: String(revision) }],
            success: [{ request_delete_range: { key } }],
          },
          options,
        ),
      { timeoutMs },
    );
    this.#saw(response);
    return response;
  }

  /**
   * A session key that could not be deleted would block its lock for as long as the session lives (the other
   * locks keep it alive), so the delete is retried in the background until it lands or the session ends.
   */
  #retryDelete(key: Buffer, revision: bigint | undefined, lease: TrackedLease): void {
    this.#cleanups.run(
      () => (lease.isLost ? Promise.resolve() : this.#deleteKey(key, revision, this.#undoTryMs)),
      this.#clock.monotonic() + SESSION_CLEANUP_MS,
    );
  }

  /** One bounded try to revoke a contender's lease; true once etcd confirmed it gone (revoked now or before). */
  async #tryRevoke(lease: TrackedLease): Promise<boolean> {
    try {
      await this.#leases.revoke(lease, this.#undoTryMs);
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * A grant's validity as core measures it: from the moment the lease's TTL last (re)started, which is the send
 * time of its last confirmed grant or keep-alive. After a wait in the queue that moment comes after the acquire
 * call began, and `queuedMs` tells core how much later. A session confirmed before this call began cannot be
 * expressed that way; then `ttlMs` is what is left of the lease, counted from the call's start (never less than
 * the TTL asked for: the session is refreshed beside the write otherwise).
 */
function validity(lease: TrackedLease, startedAt: number): { ttlMs: number; queuedMs?: number } {
  const queuedMs = lease.confirmedAt - startedAt;
  if (queuedMs >= 0) return { ttlMs: lease.ttlMs, queuedMs };
  return { ttlMs: Math.floor(lease.expiresAt - startedAt) };
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new TransportError(String(value));
}
