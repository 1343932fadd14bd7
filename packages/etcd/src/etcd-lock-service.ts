import { setMaxListeners } from 'node:events';
import {
  type AcquireRequest,
  type AcquireResult,
  type Lease,
  type LockInfo,
  type LockService,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
  systemClock,
  validateName,
} from '@dlock/core';
import {
  acquireInQueue,
  BackgroundRetries,
  linkSignals,
  type QueueDriver,
  type QueueTools,
  validateMetadata,
  validateOwnerId,
  validatePermits,
} from '@dlock/core/adapter';
import { ChangeFeeds } from './change-feeds.js';
import type { KvClientLike } from './client-like.js';
import { EtcdServiceClosedError } from './errors.js';
import { EtcdProtocol } from './etcd-protocol.js';
import { EtcdReleaseWatch } from './etcd-release-watch.js';
import { EtcdSemaphoreProtocol } from './etcd-semaphore-protocol.js';
import { EtcdSession, seconds } from './etcd-session.js';
import { SESSION_CLEANUP_MS } from './grants.js';
import { inspectLock } from './inspect.js';
import { lockDirectory, prefixRangeEnd } from './keys.js';
import { type EtcdLockServiceOptions, resolveOptions } from './options.js';
import { EtcdRequests } from './requests.js';

/**
 * A {@link LockService} on etcd, with the queue of etcd's own `concurrency.Mutex` (see `EtcdProtocol`), run by
 * core's one queue algorithm.
 *
 * - Fencing token: the holder key's create revision, cluster-wide and strictly increasing.
 * - TTL: the lease TTL, rounded up to whole seconds (etcd also raises it to its minimum, 2 s by default). The grant
 *   reports the TTL granted and, after a wait, when it last restarted (`queuedMs`).
 * - Renew: one keep-alive round trip with a deadline; a lease etcd no longer knows → `renewed: false`.
 * - Release: a lease per lock is revoked (which deletes its key in the same raft entry); in session mode the key
 *   is deleted if its create revision still matches.
 * - Elections (etcd's `concurrency.Election` layout): the metadata is the key's value, written with the key;
 *   `inspect` reads the first key of the directory, `updateMetadata` rewrites the value if the key is still ours,
 *   `watchChanges` watches the directory (one watch per name, shared).
 * - Semaphores (`acquirePermit`, see `EtcdSemaphoreProtocol`): a permit is a slot key created under the lease only if
 *   absent; its token is that key's create revision. Waiters queue in FIFO order, one wake-up per release.
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
  readonly #prefix: string;
  readonly #sessionMode: boolean;
  readonly #session: EtcdSession;
  readonly #watches: EtcdReleaseWatch;
  readonly #changes: ChangeFeeds;
  readonly #kv: KvClientLike;
  readonly #requests: EtcdRequests;
  readonly #protocol: EtcdProtocol;
  readonly #semaphores: EtcdSemaphoreProtocol;
  readonly #cleanups: BackgroundRetries;
  readonly #queue: QueueTools;
  readonly #leaseListeners = new Set<(ownershipTokens: readonly string[]) => void>();
  readonly #acquiring = new Set<Promise<AcquireResult>>();
  readonly #closing = new AbortController();
  #closed: Promise<void> | undefined;

  constructor(options: EtcdLockServiceOptions) {
    const resolved = resolveOptions(options);
    const { client, requestTimeoutMs, sessionTtlMs } = resolved;
    const clock = resolved.clock ?? systemClock;
    const requests = new EtcdRequests(clock, requestTimeoutMs);
    this.#prefix = resolved.prefix;
    this.#sessionMode = sessionTtlMs !== undefined;
    this.#cleanups = new BackgroundRetries(clock);
    this.#session = new EtcdSession(client.leaseClient, requests, sessionTtlMs, (tokens) =>
      this.#sessionLost(tokens),
    );
    this.#watches = new EtcdReleaseWatch(client.watchClient, requests);
    this.#changes = new ChangeFeeds(this.#watches, resolved.prefix);
    this.#kv = client.kv;
    this.#requests = requests;
    const parts = {
      kv: client.kv,
      requests,
      session: this.#session,
      watch: this.#watches,
      cleanups: this.#cleanups,
      prefix: resolved.prefix,
    };
    this.#protocol = new EtcdProtocol(parts);
    this.#semaphores = new EtcdSemaphoreProtocol(parts);
    this.#queue = {
      clock,
      cleanups: this.#cleanups,
      // Past this a leftover key no longer matters: a lease of its own has expired (two TTLs cover etcd raising a
      // short TTL to its minimum); a session's key is tried for longer, as the other locks keep the session alive.
      cleanupHorizonMs: (request) =>
        this.#sessionMode ? SESSION_CLEANUP_MS : 2 * seconds(request.ttlMs) * 1000 + requestTimeoutMs,
    };
    // Every pending acquire listens for close: hundreds are normal, not a leak.
    setMaxListeners(0, this.#closing.signal);
  }

  /** True in session mode (locks share a lease). */
  get sessionMode(): boolean {
    return this.#sessionMode;
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    validateRequest(request);
    return this.#inQueue(this.#protocol, request);
  }

  /**
   * A permit of the semaphore `request.name` (at most `request.permits` held at once): a free slot when nobody
   * queues, else a place in the semaphore's FIFO queue for up to `waitMs`. Rejects with `PermitsMismatchError` while
   * holders or waiters of the semaphore were admitted with another limit.
   */
  async acquirePermit(request: PermitRequest): Promise<AcquireResult> {
    this.#assertOpen();
    validateRequest(request);
    validatePermits(request.permits, 'request.permits');
    return this.#inQueue(this.#semaphores, request);
  }

  /** Free slots of the semaphore right now, in one read (`PermitsMismatchError` as for `acquirePermit`). */
  async availablePermits(name: string, permits: number): Promise<number> {
    this.#assertOpen();
    validateName(name);
    validatePermits(permits, 'permits');
    return this.#semaphores.available(name, permits);
  }

  /**
   * The semaphore's holders (slot keys: owner id and metadata from the value, create revision as the fencing token)
   * and its queue keys as waiters, in one read (`PermitsMismatchError` as for `acquirePermit`). No `expiresInMs`.
   */
  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    this.#assertOpen();
    validateName(name);
    validatePermits(permits, 'permits');
    return this.#semaphores.inspect(name, permits);
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    return this.#renewOne(request);
  }

  /**
   * Concurrent renewals of grants (locks and permits alike) on one lease share one keep-alive, so a batch costs one
   * per distinct lease.
   */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    return Promise.all(requests.map((request) => this.#renewOne(request)));
  }

  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    return lease.slot === undefined ? this.#protocol.release(lease) : this.#semaphores.release(lease);
  }

  /**
   * Watches the lock's directory for deletes. Creating a watch takes a round trip; so that a release in that
   * window is not missed, the watch starts just after the newest revision this service has seen, if it saw one
   * within the last second (an older start would replay history for nothing). A watch that restarts (its start
   * compacted away, its stream reset) may have missed a delete, so it calls `onReleased` too: "may have become free".
   */
  watch(name: string, onReleased: () => void): () => void {
    validateName(name);
    if (this.#closing.signal.aborted) return () => {};
    const directory = lockDirectory(this.#prefix, name);
    const startRevision = this.#protocol.recentRevision();
    return this.#watches.watch(
      { key: directory, rangeEnd: prefixRangeEnd(directory), ...(startRevision ? { startRevision } : {}) },
      { onDeletes: () => onReleased(), onReset: () => onReleased() },
    );
  }

  /**
   * The holder of `name` as etcd has it now (one read): the first key of its directory, its create revision as the
   * fencing token, its value as the metadata, and the keys behind it as waiters. See `inspectLock` for when a key
   * outlives its lease.
   */
  async inspect(name: string): Promise<LockInfo> {
    this.#assertOpen();
    validateName(name);
    const directory = lockDirectory(this.#prefix, name);
    return inspectLock(this.#kv, this.#requests, directory, prefixRangeEnd(directory));
  }

  /** One transaction: rewrites the held key's value if its create revision and lease are still ours. */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    this.#assertOpen();
    validateMetadata(metadata, 'metadata');
    return this.#protocol.updateMetadata(lease, metadata);
  }

  /**
   * Calls `onChange` on every change under the lock's directory, once when etcd confirms the watch, and after the
   * watch stream resets. Subscribers of one name share one etcd watch.
   */
  watchChanges(name: string, onChange: () => void): () => void {
    validateName(name);
    if (this.#closing.signal.aborted) return () => {};
    return this.#changes.subscribe(name, onChange);
  }

  watchLeases(onLost: (ownershipTokens: readonly string[]) => void): () => void {
    const listener = (tokens: readonly string[]): void => onLost(tokens);
    this.#leaseListeners.add(listener);
    return () => {
      this.#leaseListeners.delete(listener);
    };
  }

  /**
   * Gives up every lock and permit this service holds (revoking its leases, bounded by `requestTimeoutMs`) and
   * reports them lost to every `watchLeases` listener (a `LockClient` still open), ends pending acquires, closes its
   * streams. Idempotent. Does not close the `etcd3` client, which the caller owns. Every call after (and acquires
   * ended by) close rejects with a `ClientClosedError` (code `CLIENT_CLOSED`).
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
    // Each pending acquire ends at once; what it leaves in a queue is being removed once it has.
    await Promise.allSettled([...this.#acquiring]);
    this.#watches.close();
    this.#changes.clear();
    const locks = this.#protocol.grants.forgetAll();
    const permits = this.#semaphores.grants.forgetAll();
    // Told now, before the revokes go out: from here on the service neither renews nor releases these grants, and
    // a LockClient still open on it must not keep reporting them held (for up to a TTL) while another client may
    // already be granted them. Locks and permits alike, in both lease modes.
    this.#reportLost([...locks.tokens, ...permits.tokens]);
    // All at once, so that an unreachable etcd costs one request timeout, not two: a session's revoke takes every
    // key on it, a queue key a clean-up in flight is still deleting included, so it need not wait for that delete.
    await Promise.allSettled([
      this.#cleanups.close(),
      ...[...locks.ownLeases, ...permits.ownLeases].map((lease) => this.#session.revoke(lease)),
      this.#session.close(),
    ]);
  }

  async #inQueue<C, W>(driver: QueueDriver<C, W>, request: AcquireRequest): Promise<AcquireResult> {
    // close() ends a pending acquire as the caller giving up would: core gives back whatever it won meanwhile.
    const signal = linkSignals(request.signal, this.#closing.signal);
    const acquiring = acquireInQueue(driver, { ...request, signal: signal.signal }, this.#queue);
    this.#acquiring.add(acquiring);
    try {
      return await acquiring;
    } finally {
      this.#acquiring.delete(acquiring);
      signal.dispose();
    }
  }

  #renewOne(request: RenewRequest): Promise<RenewResult> {
    return request.lease.slot === undefined ? this.#protocol.renew(request) : this.#semaphores.renew(request);
  }

  #assertOpen(): void {
    if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
  }

  #sessionLost(tokens: readonly string[]): void {
    this.#protocol.grants.forgetLost(tokens);
    this.#semaphores.grants.forgetLost(tokens);
    this.#reportLost(tokens);
  }

  #reportLost(tokens: readonly string[]): void {
    if (tokens.length === 0) return;
    for (const listener of [...this.#leaseListeners]) {
      try {
        listener(tokens);
      } catch {
        // a listener's failure must not keep the others from hearing it
      }
    }
  }
}

/**
 * The request's name, owner id and metadata as core checks them for a `LockClient`, for callers that use the service
 * directly.
 * Sent, a lone surrogate became U+FFFD in the key (another name's lock), and metadata past etcd's request limit
 * failed as a transport error that opened the `etcd3` client's circuit breaker for every caller.
 */
function validateRequest(request: AcquireRequest): void {
  validateName(request.name, 'request.name');
  validateOwnerId(request.ownerId, 'request.ownerId');
  if (request.metadata !== undefined) validateMetadata(request.metadata, 'request.metadata');
}
