import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  type Lease,
  type LockService,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import { CallDeadlines } from '@dlock/core/adapter';
import { CREATE_MODE } from './client-like.js';
import { ZK_ERROR, ZooKeeperServiceClosedError, zkErrorCode } from './errors.js';
import { Cleanups, ParentUse, Ticker } from './housekeeping.js';
import { attemptPrefix, isNodeOfAttempt, lockParentPath, queueOrder } from './keys.js';
import { Leftovers } from './leftovers.js';
import { resolveOptions, type ZooKeeperLockServiceOptions } from './options.js';
import { ParentSweep } from './parent-sweep.js';
import { ZooKeeperReleaseWatch } from './zookeeper-release-watch.js';
import { czxidOf, isConnectionLoss, type LeaseRecord, ownerOf, type Session } from './zookeeper-session.js';
import { Sessions } from './zookeeper-sessions.js';

const NOT_RENEWED: RenewResult = Object.freeze({ renewed: false });
const EMPTY = Buffer.alloc(0);
/** A `multi` of checks stays well under ZooKeeper's 1 MB packet limit, even with 3 KB paths. */
const CHECK_CHUNK_OPS = 100;
const CHECK_CHUNK_BYTES = 200_000;
const noop = (): void => {};

/** One contender's try at a lock. */
interface Attempt {
  readonly session: Session;
  readonly parent: string;
  /** 32 hex digits, part of the node name (protected mode). */
  readonly id: string;
  /** The node's name under the parent, once known. */
  node: string | undefined;
  /** A create went out whose outcome was never seen: a node of this attempt may exist that `node` does not name. */
  uncertain: boolean;
}

/** What a contender knows right after its node exists. */
interface Enqueued {
  /** The parent's children, listed right after the create. */
  readonly children: Promise<string[]>;
  /** The node's czxid (the fencing token), known already or read with an ownership check. */
  readonly fencingToken: () => Promise<bigint>;
}

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
  /** Cancels of the requests in flight: what is still pending when `close()` ends is settled then. */
  readonly #cancels = new Set<(reason: unknown) => void>();
  readonly #ticker: Ticker;
  readonly #closing = new AbortController();
  readonly #sessions: Sessions;
  readonly #leases = new Map<string, LeaseRecord>();
  readonly #leaseListeners = new Set<(ownershipTokens: readonly string[]) => void>();
  readonly #watches: ZooKeeperReleaseWatch;
  readonly #parents: ParentUse;
  readonly #sweep: ParentSweep;
  readonly #cleanups: Cleanups;
  readonly #leftovers: Leftovers;
  readonly #acquires = new Set<Promise<unknown>>();
  /**
   * Whether a create's reply zxid is the node's czxid on this server, as ZooKeeper's FinalRequestProcessor makes
   * it: checked against `exists` on the first grant, then trusted (or, if it ever differed, never used).
   */
  #replyZxidTrusted: boolean | undefined;
  #ownerData: { readonly ownerId: string; readonly data: Buffer } | undefined;
  /** Attempt ids are this random prefix and a counter: unique across processes, and cheaper than 16 random bytes. */
  readonly #attemptPrefix = randomBytes(10).toString('hex');
  #attempts = 0;
  #closed: Promise<void> | undefined;

  constructor(options: ZooKeeperLockServiceOptions) {
    const o = resolveOptions(options);
    this.#clock = o.clock;
    this.#root = o.root;
    this.#sessionTimeoutMs = o.sessionTimeoutMs;
    this.#deadlines = new CallDeadlines(this.#clock);
    this.#ticker = new Ticker(
      this.#clock,
      () => this.#tickMs(),
      () => this.#tick(),
    );
    this.#parents = new ParentUse(this.#clock, o.idleParentMs, () => this.#ticker.wake());
    this.#sweep = new ParentSweep({
      clock: this.#clock,
      root: o.root,
      idleMs: o.idleParentMs,
      session: () => this.#sessions.current,
      known: (parent) => this.#parents.knows(parent),
      closing: this.#closing.signal,
    });
    this.#leftovers = new Leftovers({ sweeperFor: (id) => this.#sessions.sweeperFor(id) });
    this.#cleanups = new Cleanups(this.#clock, (session, parent, path, attemptId) => {
      // A client this adapter made is closed with its session, and the server deletes the nodes.
      if (!session.owned) this.#leftovers.add(session, parent, path, attemptId);
    });
    this.#watches = new ZooKeeperReleaseWatch({
      clock: this.#clock,
      liveSession: () => this.#sessions.live(),
      closing: this.#closing.signal,
    });
    this.#sessions = new Sessions({
      clock: this.#clock,
      deadlines: this.#deadlines,
      cancels: this.#cancels,
      wake: () => this.#ticker.wake(),
      closing: this.#closing.signal,
      client: o.client,
      connectionString: o.connectionString,
      sessionTimeoutMs: o.sessionTimeoutMs,
      requestTimeoutMs: o.requestTimeoutMs,
      heartbeatPath: o.root,
      opened: () => {
        this.#watches.rearm();
        this.#sweep.start();
      },
      ended: (session) => this.#sessionEnded(session),
      callerConnected: (sessionId) => this.#leftovers.connected(sessionId),
    });
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    const pending = this.#acquire(request);
    this.#acquires.add(pending);
    const forget = (): void => {
      this.#acquires.delete(pending);
    };
    pending.then(forget, forget);
    return pending;
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    this.#endIfSilent();
    const record = this.#lookup(request.lease);
    if (!record) return NOT_RENEWED;
    const sentAt = this.#clock.monotonic();
    const stat = await record.session.exists(record.path);
    return this.#confirm(record, stat !== null && ownerOf(stat) === record.session.id, sentAt);
  }

  /**
   * Renews many grants with one `multi` of existence checks per 100 nodes instead of one request per grant. A check
   * sees only that the node exists, which is enough: no other session can own a node whose name holds an attempt id
   * only this process used, and each grant is bound here to the session that made it.
   */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    this.#endIfSilent();
    const results: RenewResult[] = requests.map(() => NOT_RENEWED);
    const bySession = new Map<Session, { index: number; record: LeaseRecord }[]>();
    requests.forEach((request, index) => {
      const record = this.#lookup(request.lease);
      if (!record) return;
      let group = bySession.get(record.session);
      if (!group) {
        group = [];
        bySession.set(record.session, group);
      }
      group.push({ index, record });
    });
    const batches: Promise<void>[] = [];
    for (const [session, items] of bySession) {
      let chunk: { index: number; record: LeaseRecord }[] = [];
      let bytes = 0;
      for (const item of items) {
        chunk.push(item);
        bytes += item.record.path.length;
        if (chunk.length >= CHECK_CHUNK_OPS || bytes >= CHECK_CHUNK_BYTES) {
          batches.push(this.#renewChunk(session, chunk, results));
          chunk = [];
          bytes = 0;
        }
      }
      if (chunk.length > 0) batches.push(this.#renewChunk(session, chunk, results));
    }
    await Promise.all(batches);
    return results;
  }

  /**
   * Resolves true if this call deleted the grant's node, false if there was nothing of this grant to delete: the
   * node is gone, or its session ended (then the node goes with it, or is deleted when a caller's client brings the
   * session back). Rejects with a `TransportError` only when the outcome is unknown; the node is then deleted in the
   * background.
   */
  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    // After a pause past the session timeout the session is over, even if no timer has run yet to say so.
    this.#endIfSilent();
    const record = this.#lookup(lease);
    if (!record) return false;
    this.#forgetLease(record);
    try {
      await record.session.remove(record.path);
      return true;
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return false;
      // The handle is released locally all the same; the node must not block the queue until the session ends.
      // On a session that ended meanwhile this hands the node to the leftovers of a caller's client.
      this.#cleanups.schedule(record.session, record.parent, record.path, undefined);
      if (record.session.ended) return false;
      throw error;
    }
  }

  /**
   * Calls `onReleased` whenever the head of the lock's queue goes away (a release, a lost session, a waiter that
   * gave up at the head). Best effort: notices can be missed while the connection is down.
   */
  watch(name: string, onReleased: () => void): () => void {
    if (this.#closed) return noop;
    return this.#watches.add(lockParentPath(this.#root, name), onReleased);
  }

  watchLeases(onLost: (ownershipTokens: readonly string[]) => void): () => void {
    this.#leaseListeners.add(onLost);
    return () => {
      this.#leaseListeners.delete(onLost);
    };
  }

  /** The id (16 hex digits) and negotiated timeout of the session in use, if one is open. For diagnostics. */
  get session(): { readonly id: string; readonly timeoutMs: number } | undefined {
    const session = this.#sessions.current;
    return session ? { id: session.id, timeoutMs: session.timeoutMs } : undefined;
  }

  /**
   * Idempotent. Lets pending acquires leave their queues, deletes lock parents it no longer uses, and ends its
   * session: with `connectionString` by closing the client (ZooKeeper deletes the session's nodes); with `client`
   * by deleting the nodes it holds, leaving the client open.
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---------------------------------------------------------------------------------------------- acquiring

  async #acquire(request: AcquireRequest): Promise<AcquireResult> {
    const { name, signal } = request;
    if (signal.aborted) throw signal.reason;
    const clock = this.#clock;
    const startedAt = clock.monotonic();
    const deadline = startedAt + request.waitMs;
    const parent = lockParentPath(this.#root, name);
    this.#endIfSilent();
    const session = this.#sessions.current ?? (await this.#sessions.live(signal));
    if (session.leases.size > 0) await this.#reapOverdue(session);
    const attempt: Attempt = {
      session,
      parent,
      id: this.#nextAttemptId(),
      node: undefined,
      uncertain: false,
    };
    this.#parents.use(parent);
    session.engage();
    let granted = false;
    try {
      const queued = await this.#enqueue(attempt, this.#nodeData(request.ownerId));
      let children = await queued.children;
      for (;;) {
        if (signal.aborted) throw signal.reason;
        const queue = queueOrder(children);
        const ours = attempt.node as string;
        const index = queue.indexOf(ours);
        if (index < 0) {
          throw session.endError ?? new TransportError(`the queue node of lock "${name}" disappeared`);
        }
        if (attempt.uncertain) this.#dropDuplicates(attempt, queue);
        if (index === 0) {
          const fencingToken = await queued.fencingToken();
          if (session.endError) throw session.endError;
          const record: LeaseRecord = {
            name,
            token: ours,
            parent,
            path: `${parent}/${ours}`,
            session,
            confirmedAt: session.lastContactAt,
          };
          this.#leases.set(ours, record);
          session.addLease(record);
          granted = true;
          return {
            acquired: true,
            grant: {
              ownershipToken: ours,
              fencingToken,
              ttlMs: session.timeoutMs,
              // The session is known alive when the last answered request was sent, so it lives at least a timeout
              // from then: after a wait in the queue, that is much later than the call began.
              queuedMs: Math.max(0, session.lastContactAt - startedAt),
            },
          };
        }
        if (clock.monotonic() >= deadline) return { acquired: false };
        await this.#waitForTurn(session, `${parent}/${queue[index - 1]}`, deadline, signal);
        children = await session.getChildren(parent);
      }
    } finally {
      session.disengage();
      if (!granted) {
        await this.#leaveQueue(attempt);
        this.#parents.unuse(parent);
      }
    }
  }

  #nextAttemptId(): string {
    this.#attempts += 1;
    return this.#attemptPrefix + this.#attempts.toString(16).padStart(12, '0');
  }

  /** The node's data names its owner, for people looking at the tree. */
  #nodeData(ownerId: string): Buffer {
    if (this.#ownerData?.ownerId !== ownerId) this.#ownerData = { ownerId, data: Buffer.from(ownerId) };
    return this.#ownerData.data;
  }

  /**
   * Creates this attempt's node. The children are listed in the same breath (pipelined: ZooKeeper answers a
   * session's requests in order, so the list includes the new node), which saves a round trip per acquire.
   */
  async #enqueue(attempt: Attempt, data: Buffer): Promise<Enqueued> {
    const { session, parent, id } = attempt;
    const prefix = attemptPrefix(parent, id);
    for (let round = 0; ; round++) {
      const created = session.create(prefix, data, CREATE_MODE.EPHEMERAL_SEQUENTIAL, (late) =>
        // Created after the deadline gave up on it: an orphan, unless deleted.
        this.#cleanups.schedule(session, parent, late.path, undefined),
      );
      const listed = session.getChildren(parent);
      listed.catch(noop);
      let path: string;
      let zxid: bigint | undefined;
      try {
        ({ path, zxid } = await created);
      } catch (error) {
        if (zkErrorCode(error) === ZK_ERROR.NO_NODE && round < 4) {
          await this.#ensureParent(session, parent);
          continue;
        }
        if (error instanceof TransportError) attempt.uncertain = true;
        if (isConnectionLoss(error) && round < 4) {
          // The create may have happened before the connection dropped: look for the node by the attempt id.
          const found = await this.#findAttemptNode(session, parent, id);
          if (found.node === undefined) continue;
          attempt.node = found.node;
          return {
            children: Promise.resolve(found.children),
            fencingToken: this.#tokenReader(session, `${parent}/${found.node}`, undefined),
          };
        }
        throw error;
      }
      attempt.node = path.slice(parent.length + 1);
      return { children: listed, fencingToken: this.#tokenReader(session, path, zxid) };
    }
  }

  /**
   * The fencing token of a node this attempt made. From the create's reply when that is trusted; otherwise read
   * at once (a waiter has it by the time its turn comes) and checked: CURATOR-604, a node found after a connection
   * loss is a grant only if this very session owns it, never one left by an earlier session.
   */
  #tokenReader(session: Session, path: string, replyZxid: bigint | undefined): () => Promise<bigint> {
    if (replyZxid !== undefined && this.#replyZxidTrusted === true) return () => Promise.resolve(replyZxid);
    const stat = session.exists(path);
    stat.catch(noop);
    return async () => {
      const found = await stat;
      if (found === null || ownerOf(found) !== session.id) {
        throw new TransportError(`the queue node ${path} does not belong to this session`);
      }
      const czxid = czxidOf(found);
      if (replyZxid !== undefined && this.#replyZxidTrusted === undefined) {
        this.#replyZxidTrusted = replyZxid === czxid;
        if (!this.#replyZxidTrusted) {
          process.emitWarning(
            '@dlock/zookeeper: a create reply zxid differed from the node czxid; reading czxid with exists from now on',
            'DLockWarning',
          );
        }
      }
      return czxid;
    };
  }

  async #findAttemptNode(
    session: Session,
    parent: string,
    attemptId: string,
  ): Promise<{ node: string | undefined; children: string[] }> {
    try {
      const children = await session.getChildren(parent);
      return { node: children.find((child) => isNodeOfAttempt(child, attemptId)), children };
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return { node: undefined, children: [] };
      throw error;
    }
  }

  /** A retried create can leave two nodes of one attempt (a lagging server did not show the first): drop extras. */
  #dropDuplicates(attempt: Attempt, queue: readonly string[]): void {
    for (const child of queue) {
      if (child !== attempt.node && isNodeOfAttempt(child, attempt.id)) {
        this.#cleanups.schedule(attempt.session, attempt.parent, `${attempt.parent}/${child}`, undefined);
      }
    }
  }

  async #ensureParent(session: Session, parent: string): Promise<void> {
    if (await this.#createPersistent(session, parent)) return;
    // The root is missing too: create it segment by segment, then the parent.
    const segments = this.#root.slice(1).split('/');
    for (let i = 1; i <= segments.length; i++) {
      await this.#createPersistent(session, `/${segments.slice(0, i).join('/')}`);
    }
    if (!(await this.#createPersistent(session, parent))) {
      throw new TransportError(`could not create the lock node ${parent}`);
    }
  }

  /** Creates a persistent node; true if it exists now, false if its parent is missing. */
  async #createPersistent(session: Session, path: string): Promise<boolean> {
    try {
      await session.create(path, EMPTY, CREATE_MODE.PERSISTENT);
      return true;
    } catch (error) {
      const code = zkErrorCode(error);
      if (code === ZK_ERROR.NODE_EXISTS) return true;
      if (code === ZK_ERROR.NO_NODE) return false;
      throw error;
    }
  }

  /**
   * Waits until the node before ours is gone, the deadline passes (resolves), or the caller gives up, the session
   * ends or the service closes (rejects). The watch is set with getData, not exists: on a node that is already gone,
   * exists would leave a watch behind that nothing ever fires. No timer of its own: the wait's deadline shares the one
   * timer of the call deadlines, so a hand-off costs no setTimeout/clearTimeout pair.
   */
  async #waitForTurn(
    session: Session,
    predecessor: string,
    deadline: number,
    signal: AbortSignal,
  ): Promise<void> {
    let wake = noop;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    if ((await session.watchNode(predecessor, () => wake())) === null) return;
    // A watch lost to a client bug must not strand a waiter until its budget runs out: look again now and then.
    const recheckMs = Math.max(1_000, session.timeoutMs);
    for (;;) {
      const now = this.#clock.monotonic();
      if (now >= deadline) return;
      const stops = [signal, session.endSignal, this.#closing.signal];
      if (await this.#wokenOrDue(woken, Math.min(deadline, now + recheckMs), stops)) return;
      if (this.#clock.monotonic() >= deadline) return;
      if ((await session.exists(predecessor)) === null) return;
    }
  }

  /** True when `woken` settles first, false at `until`; rejects with the reason of the first of `stops` to abort. */
  #wokenOrDue(woken: Promise<void>, until: number, stops: readonly AbortSignal[]): Promise<boolean> {
    const aborted = stops.find((s) => s.aborted);
    if (aborted) return Promise.reject(aborted.reason);
    return new Promise<boolean>((resolve, reject) => {
      let done = false;
      const finish = (): boolean => {
        if (done) return false;
        done = true;
        this.#deadlines.delete(due);
        for (const s of stops) s.removeEventListener('abort', onAbort);
        return true;
      };
      const onAbort = (event: Event): void => {
        if (finish()) reject((event.target as AbortSignal).reason);
      };
      for (const s of stops) s.addEventListener('abort', onAbort, { once: true });
      const due = this.#deadlines.add(until, () => {
        if (finish()) resolve(false);
      });
      woken.then(() => {
        if (finish()) resolve(true);
      });
    });
  }

  /** A contender that did not get the lock deletes its node, so it does not hold up the queue. */
  async #leaveQueue(attempt: Attempt): Promise<void> {
    const { session, parent } = attempt;
    if (session.ended) {
      // Its nodes go with it only once the server says so: a caller's client can bring the session back.
      if (attempt.node !== undefined)
        this.#cleanups.schedule(session, parent, `${parent}/${attempt.node}`, undefined);
      if (attempt.uncertain) this.#cleanups.schedule(session, parent, undefined, attempt.id);
      return;
    }
    if (attempt.node !== undefined) {
      const path = `${parent}/${attempt.node}`;
      try {
        await session.remove(path);
      } catch (error) {
        if (zkErrorCode(error) !== ZK_ERROR.NO_NODE)
          this.#cleanups.schedule(session, parent, path, undefined);
      }
    }
    if (attempt.uncertain) this.#cleanups.schedule(session, parent, undefined, attempt.id);
  }

  // ---------------------------------------------------------------------------------------------- grants

  #lookup(lease: Lease): LeaseRecord | undefined {
    const record = this.#leases.get(lease.ownershipToken);
    if (!record || record.name !== lease.name) return undefined;
    if (record.session.ended) {
      this.#forgetLease(record);
      return undefined;
    }
    return record;
  }

  #forgetLease(record: LeaseRecord): void {
    if (this.#leases.get(record.token) !== record) return;
    this.#leases.delete(record.token);
    record.session.deleteLease(record.token);
    this.#parents.unuse(record.parent);
  }

  #confirm(record: LeaseRecord, alive: boolean, sentAt: number): RenewResult {
    if (!alive || record.session.ended || this.#leases.get(record.token) !== record) {
      this.#forgetLease(record);
      return NOT_RENEWED;
    }
    if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
    return { renewed: true, ttlMs: record.session.timeoutMs };
  }

  async #renewChunk(
    session: Session,
    items: readonly { index: number; record: LeaseRecord }[],
    results: RenewResult[],
  ): Promise<void> {
    const sentAt = this.#clock.monotonic();
    const outcome = await session.checkAll(items.map((item) => item.record.path));
    if (outcome.ok) {
      for (const { index, record } of items) results[index] = this.#confirm(record, true, sentAt);
      return;
    }
    // Some node is gone; a failed multi does not say reliably which others exist, so ask each.
    const stats = await Promise.all(items.map((item) => session.exists(item.record.path)));
    items.forEach(({ index, record }, i) => {
      const stat = stats[i];
      results[index] = this.#confirm(record, stat != null && ownerOf(stat) === session.id, sentAt);
    });
  }

  /** Deletes grants nobody renewed for a whole session timeout, as a TTL service would let them expire. */
  async #reapOverdue(session: Session): Promise<void> {
    const now = this.#clock.monotonic();
    const reaped: Promise<void>[] = [];
    for (const record of session.leases.values()) {
      if (now - record.confirmedAt >= session.timeoutMs) reaped.push(this.#reap(record));
    }
    if (reaped.length > 0) await Promise.all(reaped);
  }

  async #reap(record: LeaseRecord): Promise<void> {
    if (this.#leases.get(record.token) !== record) return;
    this.#forgetLease(record);
    this.#reportLost([record.token]);
    try {
      await record.session.remove(record.path);
    } catch (error) {
      if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) {
        this.#cleanups.schedule(record.session, record.parent, record.path, undefined);
      }
    }
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

  // ---------------------------------------------------------------------------------------------- sessions

  /**
   * Every grant of an ended session is lost, at once. Its nodes and pending cleanups become leftovers if a caller's
   * client keeps the session: the adapter gives a session up slightly before the server would.
   */
  #sessionEnded(session: Session): void {
    const tokens: string[] = [];
    for (const record of [...session.leases.values()]) {
      tokens.push(record.token);
      this.#forgetLease(record);
      if (!session.owned) this.#leftovers.add(session, record.parent, record.path, undefined);
    }
    this.#cleanups.drop(session);
    if (tokens.length > 0) this.#reportLost(tokens);
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
    if (session) {
      for (const record of session.leases.values()) {
        if (now - record.confirmedAt >= session.timeoutMs) void this.#reap(record);
      }
    }
    if (this.#parents.idle > 0) this.#removeIdleParents(now);
    if (this.#cleanups.size > 0) this.#cleanups.run(now);
    return (
      this.#parents.idle > 0 || this.#cleanups.size > 0 || this.#sessions.current?.trackingSince !== undefined
    );
  }

  /** Deletes lock parents no lock of this service has used for `idleParentMs`. */
  #removeIdleParents(now: number): void {
    const session = this.#sessions.current;
    for (const parent of this.#parents.takeDue(now)) {
      // NotEmpty (another process queues there) and NoNode (someone else deleted it) are both fine.
      if (session) session.remove(parent).catch(noop);
    }
  }

  // ---------------------------------------------------------------------------------------------- closing

  #assertOpen(): void {
    if (this.#closed) throw new ZooKeeperServiceClosedError();
  }

  async #close(): Promise<void> {
    this.#closing.abort(new ZooKeeperServiceClosedError());
    this.#watches.close();
    // Pending acquires see the abort, leave their queues and settle (every call they make is bounded).
    await Promise.allSettled([...this.#acquires]);
    const session = this.#sessions.current;
    const idle = this.#parents.takeDue(Number.POSITIVE_INFINITY);
    if (session?.owned) {
      await Promise.allSettled(idle.map((path) => session.remove(path)));
      this.#sessions.end(session, 'the lock service was closed');
    } else {
      // Only a caller's client outlives this service, and with it the session and its nodes. Ending the session
      // makes its grants and pending cleanups leftovers, which go with those of sessions given up on before.
      if (session) this.#sessions.end(session, 'the lock service was closed');
      await this.#leftovers.sweepAll();
      const sweeper = session && this.#sessions.sweeperFor(session.id);
      if (sweeper) await Promise.allSettled(idle.map((path) => sweeper.remove(path)));
    }
    this.#leftovers.close();
    this.#sessions.close();
    this.#cleanups.drop();
    this.#parents.takeDue(Number.POSITIVE_INFINITY);
    // Requests still unanswered (a heartbeat, a cleanup's delete) are over: the service is.
    const closed = new ZooKeeperServiceClosedError();
    for (const cancel of [...this.#cancels]) cancel(closed);
    this.#deadlines.stop();
    this.#ticker.close();
  }
}
