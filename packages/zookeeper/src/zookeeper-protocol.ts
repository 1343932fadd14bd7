import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type Clock,
  type Grant,
  type Lease,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import {
  type BackgroundRetries,
  type CallDeadlines,
  type QueueDriver,
  type Standing,
  WakeSignal,
} from '@dlock/core/adapter';
import { CREATE_MODE } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import type { ParentUse } from './housekeeping.js';
import { attemptPrefix, isNodeOfAttempt, lockParentPath, queueOrder } from './keys.js';
import type { Leftovers } from './leftovers.js';
import { encodeNodeData } from './node-data.js';
import {
  czxidOf,
  isConnectionLoss,
  type LeaseRecord,
  ownerOf,
  type Session,
  type SessionNodes,
} from './zookeeper-session.js';
import type { Sessions } from './zookeeper-sessions.js';

/** One acquire attempt's place in a lock's queue: an ephemeral sequential node named with the attempt's id. */
export interface Claim extends SessionNodes {
  readonly request: AcquireRequest;
  /** When the acquire call began (monotonic ms), also for a claim made after a restart: `queuedMs` counts from it. */
  readonly startedAt: number;
  /** 32 hex digits, part of the node name (protected mode). */
  readonly attemptId: string;
  /** The session the node is created in; unset until `enqueue` has one. */
  session: Session | undefined;
  /** The claim counts as a user of its lock's parent (see `ParentUse`) until it is granted or leaves. */
  usesParent: boolean;
  /** The node's czxid (the fencing token), known already or read with an ownership check. */
  fencingToken: (() => Promise<bigint>) | undefined;
  /** Set once granted, so that a grant given back is forgotten too. */
  lease: LeaseRecord | undefined;
}

/** What a queued claim waits for: the node just before its own to go. */
export interface Wait {
  readonly predecessor: string;
}

/** A claim inside `wait`: woken early when its session ends or the service closes. */
interface Waiting {
  readonly session: Session;
  readonly notify: () => void;
}

export interface ZooKeeperProtocolDeps {
  readonly clock: Clock;
  /** The service's shared deadline timer: queued claims sleep on it (no timer, no AbortController per wait). */
  readonly deadlines: CallDeadlines;
  /** The node under which every lock's parent lives. */
  readonly root: string;
  readonly sessions: Sessions;
  readonly parents: ParentUse;
  readonly leftovers: Leftovers;
  readonly cleanups: BackgroundRetries;
  /** Aborts when the service closes: a waiting claim then stops waiting (with its reason). */
  readonly closing: AbortSignal;
  /** Grants this protocol knows are gone (reaped, or their session ended). */
  readonly lost: (ownershipTokens: readonly string[]) => void;
}

const NOT_RENEWED: RenewResult = Object.freeze({ renewed: false });
const GONE: Standing<Wait> = Object.freeze({ kind: 'gone' });
const EMPTY = Buffer.alloc(0);
/** A `multi` of checks stays well under ZooKeeper's 1 MB packet limit, even with 3 KB paths. */
const CHECK_CHUNK_OPS = 100;
const CHECK_CHUNK_BYTES = 200_000;
/**
 * How long a failing delete is retried while its session lives. A node of a live session blocks its lock until it
 * is deleted, but a server that keeps refusing (an ACL) must not be asked forever; a silent server ends the session
 * first (pending nodes keep its silence watched), and then the nodes are handed on.
 */
const CLEANUP_MS = 30_000;
const noop = (): void => {};

/**
 * ZooKeeper's lock recipe as core's queue driver. A contender creates an ephemeral sequential node under the lock's
 * parent; the lowest sequence number holds the lock; every other contender watches only the node just before its
 * own, so a release wakes exactly one waiter, in arrival order. Node names carry the attempt's id, so a create
 * retried after a connection loss finds the node it may have made (ZOOKEEPER-1262, Curator's protected mode). The
 * fencing token is the holder node's czxid. Core's `acquireInQueue` runs the loop; this class is its steps, plus
 * renew and release of the grants it made, which live as long as their session.
 */
export class ZooKeeperProtocol implements QueueDriver<Claim, Wait> {
  readonly #deps: ZooKeeperProtocolDeps;
  readonly #clock: Clock;
  readonly #leases = new Map<string, LeaseRecord>();
  /** A set rather than listeners on shared signals: cheaper per wait, and no listener-count warnings. */
  readonly #waiting = new Set<Waiting>();
  /**
   * Whether a create's reply zxid is the node's czxid on this server, as ZooKeeper's FinalRequestProcessor makes
   * it: checked against `exists` on the first grant, then trusted (or, if it ever differed, never used).
   */
  #replyZxidTrusted: boolean | undefined;
  #ownerData: { readonly ownerId: string; readonly data: Buffer } | undefined;
  /** Attempt ids are this random prefix and a counter: unique across processes, and cheaper than 16 random bytes. */
  readonly #attemptPrefix = randomBytes(10).toString('hex');
  #attempts = 0;

  constructor(deps: ZooKeeperProtocolDeps) {
    this.#deps = deps;
    this.#clock = deps.clock;
  }

  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): Claim {
    this.#attempts += 1;
    return {
      request,
      startedAt,
      parent: lockParentPath(this.#deps.root, request.name),
      attemptId: this.#attemptPrefix + this.#attempts.toString(16).padStart(12, '0'),
      session: undefined,
      node: undefined,
      uncertain: false,
      giveUpAt: undefined,
      usesParent: false,
      fencingToken: undefined,
      lease: undefined,
    };
  }

  /**
   * Creates the claim's ephemeral sequential node; the children are listed in the same breath (pipelined:
   * ZooKeeper answers a session's requests in order, so the list includes the new node), which saves a round trip.
   * The node is created whether or not the caller waits: the create is what takes a free lock.
   */
  async enqueue(claim: Claim): Promise<Standing<Wait>> {
    const { sessions, parents } = this.#deps;
    const session = sessions.current ?? (await sessions.live(claim.request.signal));
    // Grants nobody renewed for a session timeout (this process was paused) go first, as a TTL would end them.
    if (session.leases.size > 0) await this.reapOverdue(session);
    claim.session = session;
    parents.use(claim.parent);
    claim.usesParent = true;
    session.hold(claim);
    return this.#standing(claim, session, await this.#create(claim, session));
  }

  /** Lists the parent's children: the claim's standing is where its node is among them. */
  async check(claim: Claim): Promise<Standing<Wait>> {
    const session = claim.session as Session;
    let children: string[];
    try {
      children = await session.getChildren(claim.parent);
    } catch (error) {
      if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
      children = [];
    }
    return this.#standing(claim, session, children);
  }

  /**
   * Watches the node just before ours, and waits until it is gone, the session ends, or `ms` passes. The watch is
   * set with getData, not exists: on a node that is already gone, exists would leave a watch behind that nothing
   * ever fires. Rejects when the caller's signal aborts or the service closes.
   */
  async wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<undefined> {
    const session = claim.session as Session;
    const { clock, closing } = this.#deps;
    if (closing.aborted) throw closing.reason;
    const until = clock.monotonic() + ms;
    const wake = new WakeSignal();
    let woken = false;
    // A session that ends wakes the claim too: the check that follows answers with the session's end.
    const waiting: Waiting = {
      session,
      notify: () => {
        woken = true;
        wake.notify();
      },
    };
    this.#waiting.add(waiting);
    try {
      if ((await session.watchNode(wait.predecessor, waiting.notify)) === null) return undefined;
      // A watch lost to a client bug must not strand a waiter until its budget runs out: look again now and then.
      const recheckMs = Math.max(1_000, session.timeoutMs);
      for (;;) {
        if (closing.aborted) throw closing.reason;
        const left = until - clock.monotonic();
        if (left <= 0) return undefined;
        await wake.wait(clock, Math.min(left, recheckMs), signal, this.#deps.deadlines);
        if (closing.aborted) throw closing.reason;
        if (woken || clock.monotonic() >= until) return undefined;
        if ((await session.exists(wait.predecessor)) === null) return undefined;
      }
    } finally {
      this.#waiting.delete(waiting);
    }
  }

  /** The service is closing: every waiting claim stops waiting (and leaves its queue). */
  stopWaiting(): void {
    for (const waiting of [...this.#waiting]) waiting.notify();
  }

  /**
   * Deletes the claim's node (giving the lock back if it was granted), and every node of its attempt id when a
   * create's outcome was never seen. NoNode counts as done. On a session that ended, the nodes are handed to the
   * leftovers: they go with the session, unless a caller's client brings it back.
   */
  async leave(claim: Claim): Promise<void> {
    const session = claim.session;
    if (!session) return;
    if (claim.lease) this.#forget(claim.lease);
    if (claim.usesParent) {
      claim.usesParent = false;
      this.#deps.parents.unuse(claim.parent);
    }
    await this.#remove(session, claim);
  }

  /** Checks that the grant's node still exists and belongs to its session. */
  async renew(request: RenewRequest): Promise<RenewResult> {
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
      for (const chunk of chunksOf(items, (item) => item.record)) {
        batches.push(this.#renewChunk(session, chunk, results));
      }
    }
    await Promise.all(batches);
    return results;
  }

  /**
   * Deletes the grant's node: true if this call deleted it, false if there was nothing of this grant to delete (the
   * node is gone, or its session ended: the node goes with it, or with the leftovers). Rejects only when the
   * outcome is unknown; the node is then deleted in the background.
   */
  async release(lease: Lease): Promise<boolean> {
    const record = this.#lookup(lease);
    if (!record) return false;
    this.#forget(record);
    try {
      await record.session.remove(record.path);
      return true;
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return false;
      // The handle is released locally all the same; the node must not block the queue until the session ends.
      this.#removeLater(record.session, nodesAt(record.parent, record.token));
      if (record.session.ended) return false;
      throw error;
    }
  }

  /**
   * Rewrites the metadata in the grant's node. True only if the server did so: the node is where the grant put it,
   * in the session that made it. No other session can have a node at that path (its name holds an attempt id only
   * this process used), and a holder's node stays first while it exists (later nodes sort after it), so the write
   * succeeding is the owner check. False when the node is gone or its session ended; rejects when the outcome is
   * unknown (the data may or may not have changed).
   */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const record = this.#lookup(lease);
    if (!record) return false;
    try {
      await record.session.setData(record.path, encodeNodeData(lease.ownerId, metadata));
    } catch (error) {
      if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
      this.#forget(record);
      return false;
    }
    // A session that ended while the write was in flight may have lost the node before it arrived.
    return !record.session.ended;
  }

  /**
   * After a reconnect under the same session: checks every grant of it on the server at once, rather than at its
   * next renewal, and reports those whose node is gone (deleted by someone while the client was away). A grant is
   * never kept on the strength of the session id alone. Checks that fail to get an answer change nothing; renewals
   * go on asking.
   */
  async verify(session: Session): Promise<void> {
    const records = [...session.leases.values()];
    if (records.length === 0 || session.ended) return;
    const gone: string[] = [];
    await Promise.all(
      chunksOf(records, (record) => record).map(async (chunk) => {
        const sentAt = this.#clock.monotonic();
        let alive: readonly boolean[];
        try {
          alive = await this.#alive(session, chunk);
        } catch {
          return;
        }
        chunk.forEach((record, i) => {
          if (this.#leases.get(record.token) !== record) return;
          if (alive[i] === true) {
            if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
            return;
          }
          this.#forget(record);
          gone.push(record.token);
        });
      }),
    );
    if (gone.length > 0) this.#deps.lost(gone);
  }

  /** Deletes grants nobody renewed for a whole session timeout, as a TTL service would let them expire. */
  async reapOverdue(session: Session): Promise<void> {
    const now = this.#clock.monotonic();
    const reaped: Promise<void>[] = [];
    for (const record of session.leases.values()) {
      if (now - record.confirmedAt >= session.timeoutMs) reaped.push(this.#reap(record));
    }
    if (reaped.length > 0) await Promise.all(reaped);
  }

  /**
   * Every grant of an ended session is lost, at once. Its grants and pending nodes are handed to the leftovers if a
   * caller's client keeps the session: the adapter gives a session up slightly before the server would.
   */
  sessionEnded(session: Session): void {
    const tokens: string[] = [];
    for (const record of [...session.leases.values()]) {
      tokens.push(record.token);
      this.#forget(record);
      if (!session.owned) this.#deps.leftovers.add(session, record.parent, record.path, undefined);
    }
    for (const nodes of [...session.pending]) this.#handOver(session, nodes);
    for (const waiting of [...this.#waiting]) if (waiting.session === session) waiting.notify();
    if (tokens.length > 0) this.#deps.lost(tokens);
  }

  /** Where the claim stands among the parent's children; takes the grant when it is first. */
  async #standing(claim: Claim, session: Session, children: readonly string[]): Promise<Standing<Wait>> {
    const queue = queueOrder(children);
    const ours = claim.node as string;
    const index = queue.indexOf(ours);
    if (index < 0) {
      if (session.endError) throw session.endError;
      return GONE;
    }
    if (claim.uncertain) this.#dropDuplicates(claim, session, queue);
    if (index > 0) return { kind: 'behind', wait: { predecessor: `${claim.parent}/${queue[index - 1]}` } };
    const fencingToken = await (claim.fencingToken as () => Promise<bigint>)();
    if (session.endError) throw session.endError;
    return { kind: 'first', grant: this.#grant(claim, session, ours, fencingToken) };
  }

  #grant(claim: Claim, session: Session, node: string, fencingToken: bigint): Grant {
    const record: LeaseRecord = {
      name: claim.request.name,
      token: node,
      parent: claim.parent,
      path: `${claim.parent}/${node}`,
      session,
      confirmedAt: session.lastContactAt,
    };
    this.#leases.set(node, record);
    session.addLease(record);
    session.letGo(claim);
    claim.lease = record;
    // The grant uses the parent now, until it is forgotten.
    claim.usesParent = false;
    return {
      ownershipToken: node,
      fencingToken,
      ttlMs: session.timeoutMs,
      // The session is known alive when the last answered request was sent, so it lives at least a timeout from
      // then: after a wait in the queue, that is much later than the call began.
      queuedMs: Math.max(0, session.lastContactAt - claim.startedAt),
    };
  }

  /**
   * Creates the claim's node; resolves the parent's children, listed right after. A missing parent is created; a
   * connection lost with the create's reply is answered by looking for the node by the attempt id.
   */
  async #create(claim: Claim, session: Session): Promise<string[]> {
    const { parent, attemptId } = claim;
    const prefix = attemptPrefix(parent, attemptId);
    const data = this.#nodeData(claim.request);
    for (let round = 0; ; round++) {
      const created = session.create(prefix, data, CREATE_MODE.EPHEMERAL_SEQUENTIAL, (late) =>
        // Created after the deadline gave up on it: an orphan, unless deleted.
        this.#removeLater(session, nodesAt(parent, late.path.slice(parent.length + 1))),
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
        if (error instanceof TransportError) claim.uncertain = true;
        if (isConnectionLoss(error) && round < 4) {
          // The create may have happened before the connection dropped: look for the node by the attempt id.
          const found = await this.#findAttemptNode(session, parent, attemptId);
          if (found.node === undefined) continue;
          claim.node = found.node;
          claim.fencingToken = this.#tokenReader(session, `${parent}/${found.node}`, undefined);
          return found.children;
        }
        throw error;
      }
      claim.node = path.slice(parent.length + 1);
      claim.fencingToken = this.#tokenReader(session, path, zxid);
      return listed;
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
    const children = await childrenOf(session, parent);
    return { node: children.find((child) => isNodeOfAttempt(child, attemptId)), children };
  }

  /** A retried create can leave two nodes of one attempt (a lagging server did not show the first): drop extras. */
  #dropDuplicates(claim: Claim, session: Session, queue: readonly string[]): void {
    for (const child of queue) {
      if (child !== claim.node && isNodeOfAttempt(child, claim.attemptId)) {
        this.#removeLater(session, nodesAt(claim.parent, child));
      }
    }
  }

  async #ensureParent(session: Session, parent: string): Promise<void> {
    if (await createPersistent(session, parent)) return;
    // The root is missing too: create it segment by segment, then the parent.
    const segments = this.#deps.root.slice(1).split('/');
    for (let i = 1; i <= segments.length; i++) {
      await createPersistent(session, `/${segments.slice(0, i).join('/')}`);
    }
    if (!(await createPersistent(session, parent))) {
      throw new TransportError(`could not create the lock node ${parent}`);
    }
  }

  /**
   * The node's data names its owner, for people looking at the tree, and carries the grant's metadata: written by
   * the create, it is there whichever way the node becomes the holder (see `node-data.ts`).
   */
  #nodeData({ ownerId, metadata }: AcquireRequest): Buffer {
    if (metadata !== undefined) return encodeNodeData(ownerId, metadata);
    if (this.#ownerData?.ownerId !== ownerId) {
      this.#ownerData = { ownerId, data: encodeNodeData(ownerId, undefined) };
    }
    return this.#ownerData.data;
  }

  /**
   * Deletes nodes of a session, once: NoNode counts as done. A failure is thrown for the caller's retries (core's,
   * or {@link removeLater}'s) until `CLEANUP_MS` after the first one; the nodes stay tracked by their session until
   * then, so that its end hands them on.
   */
  async #remove(session: Session, nodes: SessionNodes): Promise<void> {
    if (session.ended) {
      this.#handOver(session, nodes);
      return;
    }
    session.hold(nodes);
    try {
      if (nodes.node !== undefined) await removeNode(session, `${nodes.parent}/${nodes.node}`);
      if (nodes.uncertain && nodes.attemptId !== undefined) {
        const attemptId = nodes.attemptId;
        const mine = (await childrenOf(session, nodes.parent)).filter((c) => isNodeOfAttempt(c, attemptId));
        await Promise.all(mine.map((child) => removeNode(session, `${nodes.parent}/${child}`)));
      }
    } catch (error) {
      if (session.ended) {
        this.#handOver(session, nodes);
        return;
      }
      const now = this.#clock.monotonic();
      nodes.giveUpAt ??= now + CLEANUP_MS;
      if (now < nodes.giveUpAt) throw error;
    }
    session.letGo(nodes);
  }

  /** Deletes nodes in the background (Curator's "guaranteed delete"), retried while their session lives. */
  #removeLater(session: Session, nodes: SessionNodes): void {
    this.#deps.cleanups.run(() => this.#remove(session, nodes), Number.POSITIVE_INFINITY);
  }

  /** The nodes of a session that ended go with it, unless a caller's client keeps it: then they are leftovers. */
  #handOver(session: Session, nodes: SessionNodes): void {
    session.letGo(nodes);
    if (session.owned) return;
    const path = nodes.node === undefined ? undefined : `${nodes.parent}/${nodes.node}`;
    const attemptId = nodes.uncertain ? nodes.attemptId : undefined;
    if (path !== undefined || attemptId !== undefined) {
      this.#deps.leftovers.add(session, nodes.parent, path, attemptId);
    }
  }

  #lookup(lease: Lease): LeaseRecord | undefined {
    const record = this.#leases.get(lease.ownershipToken);
    if (!record || record.name !== lease.name) return undefined;
    if (record.session.ended) {
      this.#forget(record);
      return undefined;
    }
    return record;
  }

  #forget(record: LeaseRecord): void {
    if (this.#leases.get(record.token) !== record) return;
    this.#leases.delete(record.token);
    record.session.deleteLease(record.token);
    this.#deps.parents.unuse(record.parent);
  }

  #confirm(record: LeaseRecord, alive: boolean, sentAt: number): RenewResult {
    if (!alive || record.session.ended || this.#leases.get(record.token) !== record) {
      this.#forget(record);
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
    const alive = await this.#alive(
      session,
      items.map((item) => item.record),
    );
    items.forEach(({ index, record }, i) => {
      results[index] = this.#confirm(record, alive[i] === true, sentAt);
    });
  }

  /** Whether each grant's node exists in its session: one `multi` of checks, or one `exists` each if some failed. */
  async #alive(session: Session, records: readonly LeaseRecord[]): Promise<readonly boolean[]> {
    const outcome = await session.checkAll(records.map((record) => record.path));
    if (outcome.ok) return records.map(() => true);
    // Some node is gone; a failed multi does not say reliably which others exist, so ask each.
    const stats = await Promise.all(records.map((record) => session.exists(record.path)));
    return stats.map((stat) => stat != null && ownerOf(stat) === session.id);
  }

  async #reap(record: LeaseRecord): Promise<void> {
    if (this.#leases.get(record.token) !== record) return;
    this.#forget(record);
    this.#deps.lost([record.token]);
    try {
      await removeNode(record.session, record.path);
    } catch {
      this.#removeLater(record.session, nodesAt(record.parent, record.token));
    }
  }
}

/** Splits grants into batches that keep a `multi` of checks well under ZooKeeper's packet limit. */
function chunksOf<T>(items: readonly T[], recordOf: (item: T) => LeaseRecord): T[][] {
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let bytes = 0;
  for (const item of items) {
    chunk.push(item);
    bytes += recordOf(item).path.length;
    if (chunk.length >= CHECK_CHUNK_OPS || bytes >= CHECK_CHUNK_BYTES) {
      chunks.push(chunk);
      chunk = [];
      bytes = 0;
    }
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** The nodes to delete when one node's name is known and its attempt does not matter. */
function nodesAt(parent: string, node: string): SessionNodes {
  return { parent, node, attemptId: undefined, uncertain: false, giveUpAt: undefined };
}

/** Deletes a node; NoNode (already gone) is success. */
async function removeNode(session: Session, path: string): Promise<void> {
  try {
    await session.remove(path);
  } catch (error) {
    if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
  }
}

/** A node's children; none if it does not exist. */
async function childrenOf(session: Session, parent: string): Promise<string[]> {
  try {
    return await session.getChildren(parent);
  } catch (error) {
    if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return [];
    throw error;
  }
}

/** Creates a persistent node; true if it exists now, false if its parent is missing. */
async function createPersistent(session: Session, path: string): Promise<boolean> {
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
