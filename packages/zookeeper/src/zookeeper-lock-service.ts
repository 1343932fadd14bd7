import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  type Lease,
  type LockInfo,
  type LockService,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
  validateName,
} from '@dlock/core';
import {
  acquireInQueue,
  BackgroundRetries,
  CallDeadlines,
  type QueueTools,
  validateMetadata,
  validateOwnerId,
  validatePermits,
} from '@dlock/core/adapter';
import { ZooKeeperServiceClosedError } from './errors.js';
import { ParentUse, Ticker } from './housekeeping.js';
import { idleSemaphoreStamp, removeIdleSemaphore } from './idle-semaphores.js';
import { lockParentPath, semaphoresRootPath } from './keys.js';
import { Leftovers } from './leftovers.js';
import { readLockInfo } from './lock-info.js';
import { NodeCleanup } from './node-cleanup.js';
import { removePlainParent } from './node-ops.js';
import { resolveOptions, type ZooKeeperLockServiceOptions } from './options.js';
import { ParentSweep } from './parent-sweep.js';
import { readPermitsInfo } from './permit-info.js';
import { ZooKeeperChangeWatch } from './zookeeper-change-watch.js';
import { ZooKeeperProtocol } from './zookeeper-protocol.js';
import { ZooKeeperReleaseWatch } from './zookeeper-release-watch.js';
import { ZooKeeperSemaphoreProtocol } from './zookeeper-semaphore-protocol.js';
import { Sessions } from './zookeeper-sessions.js';

const noop = (): void => {};

/**
 * A {@link LockService} on ZooKeeper, with the lock recipe of the ZooKeeper documentation:
 *
 * - A contender creates an ephemeral sequential node under the lock's parent; the lowest sequence number holds the
 *   lock; every other contender watches only the node just before its own, so a release wakes exactly one waiter,
 *   in arrival order. A waiter whose budget or signal runs out deletes its node.
 * - Node names carry a per-attempt id, so a create retried after a connection loss finds the node it may already
 *   have made instead of leaving an orphan in the queue (ZOOKEEPER-1262, Curator's protected mode).
 * - The fencing token is the holder node's creation zxid: ensemble-wide, 64-bit, strictly increasing.
 * - A lease is the session: a grant's TTL is the negotiated session timeout (whatever TTL was asked for), a renewal
 *   checks that the node still exists and belongs to this session, and when the session ends every grant of it is
 *   reported lost at once (`watchLeases`). The adapter decides that a session has ended on its own too, after a
 *   whole session timeout without an answer, because node-zookeeper-client may never say so while disconnected.
 *   With `connectionString` it then opens a new session for later acquires.
 *
 * The protocol's steps are in `zookeeper-protocol.ts`, run by core's queue algorithm; this class composes them
 * with the session, the release watch and the housekeeping.
 *
 * @example
 * ```ts
 * const service = new ZooKeeperLockService({ connectionString: '127.0.0.1:2181' });
 * const locks = new LockClient(service);
 * await locks.withLock('invoice:42', { ttlMs: 10_000, waitMs: 5_000 }, async (lock) => {
 *   await db.write(invoice, { fencingToken: lock.fencingToken });
 * });
 * await locks.close();
 * await service.close();
 * ```
 */
export class ZooKeeperLockService implements LockService, AsyncDisposable {
  readonly #clock: Clock;
  readonly #root: string;
  readonly #sessionTimeoutMs: number;
  readonly #deadlines: CallDeadlines;
  readonly #cleanups: BackgroundRetries;
  readonly #queue: QueueTools;
  readonly #ticker: Ticker;
  readonly #closing = new AbortController();
  readonly #sessions: Sessions;
  readonly #protocol: ZooKeeperProtocol;
  readonly #semaphores: ZooKeeperSemaphoreProtocol;
  /** Semaphore nodes this service uses; deleted (with their two parents) once idle, like lock parents. */
  readonly #semaphoreUse: ParentUse;
  readonly #leaseListeners = new Set<(ownershipTokens: readonly string[]) => void>();
  readonly #watches: ZooKeeperReleaseWatch;
  readonly #changes: ZooKeeperChangeWatch;
  readonly #parents: ParentUse;
  readonly #sweep: ParentSweep;
  readonly #semaphoreSweep: ParentSweep;
  readonly #leftovers: Leftovers;
  readonly #acquires = new Set<Promise<unknown>>();
  #closed: Promise<void> | undefined;

  constructor(options: ZooKeeperLockServiceOptions) {
    const o = resolveOptions(options);
    this.#clock = o.clock;
    this.#root = o.root;
    this.#sessionTimeoutMs = o.sessionTimeoutMs;
    this.#deadlines = new CallDeadlines(this.#clock);
    this.#cleanups = new BackgroundRetries(this.#clock);
    this.#queue = {
      clock: this.#clock,
      cleanups: this.#cleanups,
      // A queue node lives as long as its session, not for a TTL: the protocol's delete decides when to stop
      // (done, the session ended, or it kept failing for a while).
      cleanupHorizonMs: () => Number.POSITIVE_INFINITY,
    };
    this.#ticker = new Ticker(
      this.#clock,
      () => this.#tickMs(),
      () => this.#tick(),
    );
    this.#parents = new ParentUse(this.#clock, o.idleParentMs, () => this.#ticker.wake());
    this.#semaphoreUse = new ParentUse(this.#clock, o.idleParentMs, () => this.#ticker.wake());
    this.#sweep = new ParentSweep({
      clock: this.#clock,
      root: o.root,
      idleMs: o.idleParentMs,
      session: () => this.#sessions.current,
      known: (parent) => this.#parents.knows(parent),
      closing: this.#closing.signal,
    });
    this.#semaphoreSweep = new ParentSweep({
      clock: this.#clock,
      root: semaphoresRootPath(o.root),
      idleMs: o.idleParentMs,
      session: () => this.#sessions.current,
      known: (semaphore) => this.#semaphoreUse.knows(semaphore),
      closing: this.#closing.signal,
      idleStamp: idleSemaphoreStamp,
      remove: removeIdleSemaphore,
    });
    this.#leftovers = new Leftovers({ sweeperFor: (id) => this.#sessions.sweeperFor(id) });
    this.#watches = new ZooKeeperReleaseWatch({
      clock: this.#clock,
      liveSession: () => this.#sessions.live(),
      closing: this.#closing.signal,
    });
    this.#changes = new ZooKeeperChangeWatch({
      clock: this.#clock,
      liveSession: () => this.#sessions.live(),
      closing: this.#closing.signal,
    });
    this.#sessions = new Sessions({
      clock: this.#clock,
      deadlines: this.#deadlines,
      wake: () => this.#ticker.wake(),
      closing: this.#closing.signal,
      client: o.client,
      connectionString: o.connectionString,
      sessionTimeoutMs: o.sessionTimeoutMs,
      requestTimeoutMs: o.requestTimeoutMs,
      heartbeatPath: o.root,
      opened: () => {
        this.#watches.rearm();
        this.#changes.rearm();
        this.#sweep.start();
        this.#semaphoreSweep.start();
      },
      reconnected: (session) => {
        void this.#protocol.grants.verify(session);
        void this.#semaphores.grants.verify(session);
        this.#changes.rearm();
      },
      ended: (session) => {
        // The semaphores' first: they hand over what their claims pending on the session may hold, before the
        // lock driver hands over and lets go of every pending node.
        this.#semaphores.sessionEnded(session);
        this.#protocol.sessionEnded(session);
      },
      callerConnected: (sessionId) => this.#leftovers.connected(sessionId),
    });
    const drivers = {
      clock: this.#clock,
      deadlines: this.#deadlines,
      root: o.root,
      sessions: this.#sessions,
      leftovers: this.#leftovers,
      cleanup: new NodeCleanup({ clock: this.#clock, cleanups: this.#cleanups, leftovers: this.#leftovers }),
      closing: this.#closing.signal,
      lost: (tokens: readonly string[]) => this.#reportLost(tokens),
    };
    this.#protocol = new ZooKeeperProtocol({ ...drivers, parents: this.#parents });
    this.#semaphores = new ZooKeeperSemaphoreProtocol({ ...drivers, semaphores: this.#semaphoreUse });
  }

  /**
   * Joins the lock's queue (an ephemeral sequential node) and waits, in arrival order, up to `request.waitMs` for
   * every node ahead to go; a claim that gives up deletes its node. The grant's TTL is the session timeout.
   */
  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    validateName(request.name, 'request.name');
    validateOwnerId(request.ownerId, 'request.ownerId');
    if (request.metadata !== undefined) validateMetadata(request.metadata, 'request.metadata');
    // After a pause past the session timeout the session is over, even if no timer has run yet to say so.
    this.#endIfSilent();
    return this.#track(acquireInQueue(this.#protocol, request, this.#queue));
  }

  /**
   * A permit of the semaphore `request.name` (see `zookeeper-semaphore-protocol.ts`): an ephemeral slot node whose
   * czxid is the fencing token, taken at once when a slot is free and nobody waits, else in arrival order through
   * a queue of ephemeral sequential nodes. Like a lock, the permit's lease is the session.
   */
  async acquirePermit(request: PermitRequest): Promise<AcquireResult> {
    this.#assertOpen();
    validateName(request.name, 'request.name');
    validateOwnerId(request.ownerId, 'request.ownerId');
    validatePermits(request.permits, 'request.permits');
    if (request.metadata !== undefined) validateMetadata(request.metadata, 'request.metadata');
    this.#endIfSilent();
    return this.#track(acquireInQueue(this.#semaphores, request, this.#queue));
  }

  /** Free slots of the semaphore right now: `permits` minus its slot nodes. */
  async availablePermits(name: string, permits: number): Promise<number> {
    this.#assertOpen();
    validateName(name);
    validatePermits(permits, 'permits');
    this.#endIfSilent();
    const session = this.#sessions.current ?? (await this.#sessions.live());
    return this.#semaphores.slots.available(session, name, permits);
  }

  /**
   * The semaphore's holders (its slot nodes: owner and metadata from their data, czxid as the fencing token; no
   * `expiresInMs`, a session's remaining time is not visible to clients) and its queue nodes as waiters.
   */
  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    this.#assertOpen();
    validateName(name);
    validatePermits(permits, 'permits');
    this.#endIfSilent();
    const session = this.#sessions.current ?? (await this.#sessions.live());
    return readPermitsInfo(session, this.#root, this.#semaphores.slots, name, permits);
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    this.#endIfSilent();
    if (request.lease.slot !== undefined) return this.#semaphores.renew(request);
    return this.#protocol.renew(request);
  }

  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    this.#endIfSilent();
    if (!requests.some((request) => request.lease.slot !== undefined))
      return this.#protocol.renewMany(requests);
    // Locks and permits in one batch: each half its own way, the answers put back in request order.
    const locks = requests.filter((request) => request.lease.slot === undefined);
    const permits = requests.filter((request) => request.lease.slot !== undefined);
    const [lockResults, permitResults] = await Promise.all([
      locks.length > 0 ? this.#protocol.renewMany(locks) : [],
      this.#semaphores.renewMany(permits),
    ]);
    let l = 0;
    let p = 0;
    return requests.map((request) =>
      request.lease.slot === undefined
        ? (lockResults[l++] as RenewResult)
        : (permitResults[p++] as RenewResult),
    );
  }

  /**
   * Resolves true if this call deleted the grant's node, false if there was nothing of this grant to delete: the
   * node is gone, or its session ended (then the node goes with it, or is deleted when a caller's client brings the
   * session back). Rejects with a `TransportError` only when the outcome is unknown; the node is then deleted in the
   * background.
   */
  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    this.#endIfSilent();
    if (lease.slot !== undefined) return this.#semaphores.release(lease);
    return this.#protocol.release(lease);
  }

  /**
   * Calls `onReleased` whenever the head of the lock's queue goes away (a release, a lost session, a waiter that
   * gave up at the head). Best effort: notices can be missed while the connection is down.
   */
  watch(name: string, onReleased: () => void): () => void {
    validateName(name);
    if (this.#closed) return noop;
    return this.#watches.add(lockParentPath(this.#root, name), onReleased);
  }

  /**
   * The lock's holder as the server sees it now: the first node of its queue (held while it exists: it goes with its
   * session), its czxid as the fencing token, the metadata stored with the grant, and the nodes behind it as
   * waiters. No `expiresInMs`: a session's remaining time is not visible to clients.
   */
  async inspect(name: string): Promise<LockInfo> {
    this.#assertOpen();
    validateName(name);
    this.#endIfSilent();
    const session = this.#sessions.current ?? (await this.#sessions.live());
    return readLockInfo(session, lockParentPath(this.#root, name));
  }

  /**
   * Replaces the metadata in the grant's node (`setData` on it), keeping its czxid (the fencing token) and its
   * session (the lease). False when the grant no longer holds; rejects with a `TransportError` when the outcome is
   * unknown.
   */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    this.#assertOpen();
    // Past core's limit it is the caller's mistake, not a transport failure (ZooKeeper's client refuses over 1 MB).
    validateMetadata(metadata, 'metadata');
    this.#endIfSilent();
    return this.#protocol.updateMetadata(lease, metadata);
  }

  /**
   * Calls `onChange` when the lock's holder or its metadata may have changed, and once when the subscription is in
   * place. One child watch on the lock's parent and one data watch on the queue's head per lock name for the whole
   * service, however many subscribe. Best effort, like `watch`.
   */
  watchChanges(name: string, onChange: () => void): () => void {
    validateName(name);
    if (this.#closed) return noop;
    return this.#changes.add(lockParentPath(this.#root, name), onChange);
  }

  watchLeases(onLost: (ownershipTokens: readonly string[]) => void): () => void {
    this.#leaseListeners.add(onLost);
    return () => {
      this.#leaseListeners.delete(onLost);
    };
  }

  /** The id (16 hex digits) and negotiated timeout of the session in use, if one is open. For diagnostics. */
  get session():
    | {
        /** The session id, 16 hex digits. */
        readonly id: string;
        /** The session timeout the server granted, in ms. */
        readonly timeoutMs: number;
      }
    | undefined {
    const session = this.#sessions.current;
    return session ? { id: session.id, timeoutMs: session.timeoutMs } : undefined;
  }

  /**
   * Idempotent. Lets pending acquires leave their queues, deletes lock parents it no longer uses, and ends its
   * session: with `connectionString` by closing the client (ZooKeeper deletes the session's nodes); with `client`
   * by deleting the nodes it holds, leaving the client open. Nodes it cannot delete now (that client is not
   * connected under the session, or the server does not answer) are deleted once the client is connected under
   * that session again, and forgotten once it has another session; close() does not wait for that.
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** Calls {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #track(pending: Promise<AcquireResult>): Promise<AcquireResult> {
    this.#acquires.add(pending);
    const forget = (): void => {
      this.#acquires.delete(pending);
    };
    pending.then(forget, forget);
    return pending;
  }

  #reportLost(tokens: readonly string[]): void {
    for (const listener of [...this.#leaseListeners]) {
      try {
        listener(tokens);
      } catch {
        // a listener's failure is its own; the others must still hear
      }
    }
  }

  // ---------------------------------------------------------------------------------------------- housekeeping

  /** Applies the silence rule now rather than at the next tick (see `Sessions.endIfSilent`). */
  #endIfSilent(): void {
    this.#sessions.endIfSilent(this.#clock.monotonic(), this.#tickMs());
  }

  #tickMs(): number {
    const timeoutMs = this.#sessions.current?.timeoutMs ?? this.#sessionTimeoutMs;
    return Math.max(10, Math.min(100, Math.round(timeoutMs / 20)));
  }

  #tick(): boolean {
    const now = this.#clock.monotonic();
    this.#sessions.check(now, this.#tickMs());
    const session = this.#sessions.current;
    for (const { grants } of [this.#protocol, this.#semaphores]) {
      if (session && grants.has(session)) void grants.reapOverdue(session);
    }
    if (this.#parents.idle > 0) this.#removeIdleParents(now);
    if (this.#semaphoreUse.idle > 0) this.#removeIdleSemaphores(now);
    // A grant, a queued attempt, a request in flight or a pending delete keeps the session's silence watched.
    return (
      this.#parents.idle > 0 ||
      this.#semaphoreUse.idle > 0 ||
      this.#sessions.current?.trackingSince !== undefined
    );
  }

  /** Deletes lock parents no lock of this service has used for `idleParentMs`. */
  #removeIdleParents(now: number): void {
    const session = this.#sessions.current;
    for (const parent of this.#parents.takeDue(now)) {
      // Only one as dlock makes it: a parent with data or another ACL is someone else's to keep.
      if (session) removePlainParent(session, parent).catch(noop);
    }
  }

  /** Deletes semaphore nodes (with their parents) no permit of this service has used for `idleParentMs`. */
  #removeIdleSemaphores(now: number): void {
    const session = this.#sessions.current;
    for (const semaphore of this.#semaphoreUse.takeDue(now)) {
      if (session) removeIdleSemaphore(session, semaphore).catch(noop);
    }
  }

  // ---------------------------------------------------------------------------------------------- closing

  #assertOpen(): void {
    if (this.#closed) throw new ZooKeeperServiceClosedError();
  }

  async #close(): Promise<void> {
    this.#closing.abort(new ZooKeeperServiceClosedError());
    this.#protocol.stopWaiting();
    this.#semaphores.stopWaiting();
    this.#watches.close();
    this.#changes.close();
    // Pending acquires stop waiting and settle, leaving their queues (every call they make is bounded).
    await Promise.allSettled([...this.#acquires]);
    const session = this.#sessions.current;
    const idle = this.#parents.takeDue(Number.POSITIVE_INFINITY);
    const idleSemaphores = this.#semaphoreUse.takeDue(Number.POSITIVE_INFINITY);
    if (session?.owned) {
      await Promise.allSettled([
        ...idle.map((path) => removePlainParent(session, path)),
        ...idleSemaphores.map((path) => removeIdleSemaphore(session, path)),
      ]);
      this.#sessions.end(session, 'the lock service was closed');
    } else {
      // Only a caller's client outlives this service, and with it the session and its nodes. Ending the session
      // makes its grants and pending nodes leftovers, which go with those of sessions given up on before.
      if (session) this.#sessions.end(session, 'the lock service was closed');
      await this.#leftovers.sweepAll();
      const sweeper = session && this.#sessions.sweeperFor(session.id);
      if (sweeper) {
        await Promise.allSettled([
          ...idle.map((path) => removePlainParent(sweeper, path)),
          ...idleSemaphores.map((path) => removeIdleSemaphore(sweeper, path)),
        ]);
      }
    }
    this.#sessions.close();
    // A caller's client that is not connected under its session now may come back under it later, with the nodes
    // still there: its state is followed until they are deleted or that session is over (no timer, no wait here).
    this.#leftovers.close(() => this.#sessions.letGoOfCaller());
    // A client its owner closed already ends its session, and the nodes with it: nothing to wait for.
    if (this.#sessions.callerClosed) this.#leftovers.connected(undefined);
    // Requests still unanswered (a heartbeat, a background delete) are over: the service is.
    const stopping = this.#cleanups.close();
    this.#deadlines.stop(new ZooKeeperServiceClosedError());
    await stopping;
    this.#parents.takeDue(Number.POSITIVE_INFINITY);
    this.#semaphoreUse.takeDue(Number.POSITIVE_INFINITY);
    this.#ticker.close();
  }
}
