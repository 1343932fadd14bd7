import {
  type AcquireRequest,
  type Grant,
  type Lease,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import type { QueueDriver, Standing } from '@dlock/core/adapter';
import {
  type Attempt,
  AttemptIds,
  createQueueNode,
  type DriverDeps,
  type QueueEntry,
  queuePlace,
  sessionFor,
} from './attempts.js';
import { allExist, checkBatches } from './check-batches.js';
import { CREATE_MODE, type ZooKeeperClientLike } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { FencingTokens } from './fencing-tokens.js';
import { type GrantRecord, Grants } from './grants.js';
import type { ParentUse } from './housekeeping.js';
import { attemptPrefix, isNodeOfAttempt, lockParentPath, queueOrder } from './keys.js';
import { encodeNodeData, QueueNodeData } from './node-data.js';
import {
  childrenOf,
  createLockParent,
  deleteVersion,
  lookAtParent,
  madeParent,
  nodesAt,
  removeNode,
} from './node-ops.js';
import { predecessorGone, Waits } from './waits.js';
import {
  isConnectionLoss,
  type MultiOp,
  type MultiOutcome,
  ownerOf,
  type Session,
} from './zookeeper-session.js';

/** One acquire attempt's place in a lock's queue: an ephemeral sequential node named with the attempt's id. */
export interface Claim extends Attempt {
  /** The claim counts as a user of its lock's parent (see `ParentUse`) until it is granted or leaves. */
  usesParent: boolean;
  /** The node's czxid (the fencing token), known already or read with an ownership check. */
  fencingToken: (() => Promise<bigint>) | undefined;
  /** Set once granted, so that a grant given back is forgotten too. */
  lease: GrantRecord | undefined;
}

/** What a queued claim waits for: the node just before its own to go. */
export interface Wait {
  readonly predecessor: string;
}

export interface ZooKeeperProtocolDeps extends DriverDeps {
  /** Lock parents in use by this service (deleted once idle). */
  readonly parents: ParentUse;
}

const noop = (): void => {};

/** Tries of a caller that does not wait before it queues its node the ordinary way (see `#tryAlone`). */
const ALONE_ROUNDS = 4;
/**
 * ZooKeeper's lock recipe as core's queue driver. A contender creates an ephemeral sequential node under the lock's
 * parent; the lowest sequence number holds the lock; every other contender watches only the node just before its
 * own, so a release wakes exactly one waiter, in arrival order. Node names carry the attempt's id (protected mode,
 * `attempts.ts`). The fencing token is the holder node's czxid; a grant is its node, and lives as long as its
 * session (`grants.ts`). Core's `acquireInQueue` runs the loop; this class is its steps.
 */
export class ZooKeeperProtocol implements QueueDriver<Claim, Wait> {
  /** The grants this driver made: renewals, releases, and the service's tick, reconnect and session-end hooks. */
  readonly grants: Grants<GrantRecord>;
  readonly #deps: ZooKeeperProtocolDeps;
  readonly #waits: Waits;
  readonly #attempts = new AttemptIds();
  readonly #tokens = new FencingTokens({ nodes: 'queue', warn: true });
  readonly #nodeData = new QueueNodeData();
  /** Per client: whether its transactions can create, delete and write data (a caller's wrapped client might not). */
  readonly #multiWrites = new WeakMap<object, boolean>();

  constructor(deps: ZooKeeperProtocolDeps) {
    this.#deps = deps;
    this.#waits = new Waits(deps);
    this.grants = new Grants({
      ...deps,
      unuse: (record) => deps.parents.unuse(record.parent),
      batches: checkBatches,
      alive: allExist,
      remove: (record) => removeNode(record.session, record.path),
      removeLater: (record) => deps.cleanup.removeLater(record.session, nodesAt(record.parent, record.token)),
    });
  }

  /** Names the attempt, without I/O: its id goes into the name of every node it creates. */
  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): Claim {
    return {
      request,
      startedAt,
      parent: lockParentPath(this.#deps.root, request.name),
      attemptId: this.#attempts.next(),
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
   * Creates the claim's ephemeral sequential node and lists the parent's children with it: the create is what takes
   * a free lock. A missing parent is created. A caller that does not wait (`queue: false`) creates its node only in
   * a lock nobody holds or waits for (`#tryAlone`).
   */
  async enqueue(claim: Claim, { queue }: { readonly queue: boolean }): Promise<Standing<Wait>> {
    const session = await sessionFor(claim, this.#deps.sessions, this.grants);
    this.#deps.parents.use(claim.parent);
    claim.usesParent = true;
    session.hold(claim);
    if (!queue && this.#canMultiWrite(session.client)) {
      const alone = await this.#tryAlone(claim, session);
      if (alone !== undefined) return alone;
    }
    const entry = (await createQueueNode(session, claim, this.#nodeData.of(claim.request), {
      cleanup: this.#deps.cleanup,
      noParent: async (error, round) => {
        if (round >= 4) throw error;
        await createLockParent(session, this.#deps.root, claim.parent);
        return true;
      },
      recoverListing: false,
    })) as QueueEntry;
    claim.fencingToken = this.#tokenReader(session, `${claim.parent}/${claim.node}`, entry.zxid);
    return this.#standing(claim, session, await entry.children);
  }

  /** Lists the parent's children: the claim's standing is where its node is among them. */
  async check(claim: Claim): Promise<Standing<Wait>> {
    const session = claim.session as Session;
    return this.#standing(claim, session, (await childrenOf(session, claim.parent)) ?? []);
  }

  /** Watches the node just before ours, and waits until it is gone, the session ends, or `ms` passes. */
  wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<undefined> {
    const session = claim.session as Session;
    return this.#waits.wait(session, ms, signal, (watcher) =>
      predecessorGone(session, wait.predecessor, watcher),
    );
  }

  /** The service is closing: every waiting claim stops waiting (and leaves its queue). */
  stopWaiting(): void {
    this.#waits.stopAll();
  }

  /**
   * Deletes the claim's node (giving the lock back if it was granted), and every node of its attempt id when a
   * create's outcome was never seen (see `NodeCleanup.remove`).
   */
  async leave(claim: Claim): Promise<void> {
    const session = claim.session;
    if (!session) return;
    if (claim.lease) this.grants.forget(claim.lease);
    if (claim.usesParent) {
      claim.usesParent = false;
      this.#deps.parents.unuse(claim.parent);
    }
    await this.#deps.cleanup.remove(session, claim);
  }

  /** Checks that the grant's node still exists and belongs to its session. */
  renew(request: RenewRequest): Promise<RenewResult> {
    return this.grants.renew(request, async (record) => {
      const stat = await record.session.exists(record.path);
      return stat !== null && ownerOf(stat) === record.session.id;
    });
  }

  /** Renews many grants with one `multi` of existence checks per 100 nodes (`check-batches.ts`). */
  renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return this.grants.renewMany(requests);
  }

  /** Deletes the grant's node (`Grants.release`). */
  release(lease: Lease): Promise<boolean> {
    return this.grants.release(lease);
  }

  /**
   * Rewrites the metadata in the grant's node. True only if the server did so: the node is where the grant put it,
   * in the session that made it. No other session can have a node at that path (its name holds an attempt id only
   * this process used), and a holder's node stays first while it exists (later nodes sort after it), so the write
   * succeeding is the owner check. False when the node is gone or its session ended; rejects when the outcome is
   * unknown (the data may or may not have changed).
   */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const record = this.grants.lookup(lease);
    if (!record) return false;
    try {
      await record.session.setData(record.path, encodeNodeData(lease.ownerId, metadata));
    } catch (error) {
      if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
      this.grants.forget(record);
      return false;
    }
    // A session that ended while the write was in flight may have lost the node before it arrived.
    return !record.session.ended;
  }

  /** Every grant of an ended session is lost, at once; its pending nodes (semaphores' too) go to the leftovers. */
  sessionEnded(session: Session): void {
    const tokens = this.grants.sessionEnded(session);
    this.#deps.cleanup.handOverAll(session);
    this.#waits.sessionEnded(session);
    if (tokens.length > 0) this.#deps.lost(tokens);
  }

  /**
   * The try of a caller that does not wait: one `multi` that deletes and re-creates the lock's parent and creates
   * the claim's node in it. Deleting the parent fails with NotEmpty while anyone holds or waits, so the node is
   * made only in a free lock, and nothing is written into a held one. A node written there only to be deleted
   * would lead the queue if the holder left before its delete, and `inspect()`, an election's `leader()` and its
   * observers would report as holder a caller that was told it lost. The parent's ACL and stat are read first
   * (`getACL`): a `multi` can check a data version only, never an ACL (`setAcl` leaves the data version alone), so
   * the parent is deleted only when read with no data and the open ACL, at the version read. A parent with
   * children is listed instead: held or waited for, nothing is written. Undefined when the ordinary create should
   * decide: the parent has data or another ACL, holds only nodes that are not queue nodes, or the races did not
   * settle.
   */
  async #tryAlone(claim: Claim, session: Session): Promise<Standing<Wait> | undefined> {
    const { parent, attemptId } = claim;
    const node: MultiOp = {
      op: 'create',
      path: attemptPrefix(parent, attemptId),
      data: this.#nodeData.of(claim.request),
      mode: CREATE_MODE.EPHEMERAL_SEQUENTIAL,
    };
    // Leaves the new parent at MADE_VERSION: a delete that names it refuses data written since the read.
    const makeParent = madeParent(parent);
    for (let round = 0; round < ALONE_ROUNDS; round++) {
      const look = await lookAtParent(session, parent);
      if (look === 'foreign') return undefined;
      if (look !== 'missing' && look.children !== 0) {
        const children = await childrenOf(session, parent);
        if (children === undefined) continue; // deleted since the read: read again
        // A node of an earlier round whose answer was lost, seen only now: that one is the claim's.
        const own = children.find((child) => isNodeOfAttempt(child, attemptId));
        if (own !== undefined) return this.#found(claim, session, own, children);
        const last = queueOrder(children).at(-1);
        // Held or waited for: nothing was written. (Core never waits for a caller that does not wait.)
        if (last !== undefined) return { kind: 'behind', wait: { predecessor: `${parent}/${last}` } };
        // Only nodes that are not queue nodes keep the parent from being empty: the ordinary create decides.
        if (children.length > 0) return undefined;
        // Freed since the read (or a stat without a child count): the multi decides.
      }
      // At the version read: data written since refuses the delete with BadVersion, and nothing is lost. A parent
      // read at version 0 (made by the ordinary create, or by an older dlock) is deleted at any version: only what
      // is written to it in the one round trip since the read is lost, as is an ACL set in that round trip.
      const ops: readonly MultiOp[] =
        look === 'missing'
          ? [...makeParent, node]
          : [{ op: 'remove', path: parent, version: deleteVersion(look.version) }, ...makeParent, node];
      const made = session.multi(ops, (late) => {
        // Committed after the call gave up on it: an orphan holding the lock, unless deleted.
        const path = late.ok ? late.paths[ops.length - 1] : undefined;
        if (path !== undefined) {
          this.#deps.cleanup.removeLater(session, nodesAt(parent, path.slice(parent.length + 1)));
        }
      });
      let outcome: MultiOutcome;
      try {
        outcome = await made;
      } catch (error) {
        // Unanswered: the node may exist, so leaving deletes every node of the attempt id.
        if (error instanceof TransportError) claim.uncertain = true;
        if (!isConnectionLoss(error)) throw error;
        // The multi may have happened before the connection dropped: look for the node by the attempt id.
        const children = (await childrenOf(session, parent)) ?? [];
        const found = children.find((child) => isNodeOfAttempt(child, attemptId));
        if (found === undefined) continue;
        return this.#found(claim, session, found, children);
      }
      if (outcome.ok) {
        const path = outcome.paths[ops.length - 1];
        if (path === undefined) {
          throw new TransportError(`ZooKeeper multi on ${parent} did not name the node it made`);
        }
        // Named before the standing is taken: should it fail, leaving must know which node to delete.
        claim.node = path.slice(parent.length + 1);
        claim.fencingToken = this.#tokenReader(session, path, outcome.zxid);
        // The multi made the parent with this node alone in it: first, whoever queued after it.
        return this.#standing(claim, session, [claim.node]);
      }
      if (outcome.failed !== 0) {
        throw new TransportError(`ZooKeeper refused the try on ${parent} (error ${String(outcome.code)})`);
      }
      // Made by someone else since the read (NodeExists), or the root is missing too (NoNode): made here.
      if (look === 'missing' && outcome.code === ZK_ERROR.NO_NODE) {
        await createLockParent(session, this.#deps.root, parent);
        continue;
      }
      // Changed since the read: someone queued (NotEmpty), wrote its data (BadVersion), deleted or made it.
      if (
        outcome.code === ZK_ERROR.NOT_EMPTY ||
        outcome.code === ZK_ERROR.BAD_VERSION ||
        outcome.code === ZK_ERROR.NO_NODE ||
        outcome.code === ZK_ERROR.NODE_EXISTS
      ) {
        continue;
      }
      throw new TransportError(`ZooKeeper refused the try on ${parent} (error ${String(outcome.code)})`);
    }
    return undefined;
  }

  /**
   * The claim's node is `node`, found in a listing (`children`) after its create's answer was lost or refused: its
   * token is read from the node, and its standing is where it is among them.
   */
  #found(claim: Claim, session: Session, node: string, children: readonly string[]): Promise<Standing<Wait>> {
    claim.node = node;
    claim.fencingToken = this.#tokenReader(session, `${claim.parent}/${node}`, undefined);
    return this.#standing(claim, session, children);
  }

  /** Whether the client's transactions can create, delete and write data; probed once per client, sending nothing. */
  #canMultiWrite(client: ZooKeeperClientLike): boolean {
    let can = this.#multiWrites.get(client);
    if (can === undefined) {
      const transaction = client.transaction();
      can =
        typeof transaction.create === 'function' &&
        typeof transaction.remove === 'function' &&
        typeof transaction.setData === 'function';
      this.#multiWrites.set(client, can);
    }
    return can;
  }

  /** Where the claim stands among the parent's children; takes the grant when it is first. */
  async #standing(claim: Claim, session: Session, children: readonly string[]): Promise<Standing<Wait>> {
    const place = queuePlace(claim, session, children, this.#deps.cleanup);
    if (place !== 'head') return place;
    const fencingToken = await (claim.fencingToken as () => Promise<bigint>)();
    if (session.endError) throw session.endError;
    return { kind: 'first', grant: this.#grant(claim, session, claim.node as string, fencingToken) };
  }

  #grant(claim: Claim, session: Session, node: string, fencingToken: bigint): Grant {
    const path = `${claim.parent}/${node}`;
    const record = {
      name: claim.request.name,
      token: node,
      parent: claim.parent,
      path,
      session,
      confirmedAt: session.lastContactAt,
    };
    this.grants.add(record);
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

  /** The fencing token of a node this attempt made: from the reply if trusted, else read at once and checked. */
  #tokenReader(session: Session, path: string, replyZxid: bigint | undefined): () => Promise<bigint> {
    const known = this.#tokens.fromReply(replyZxid);
    if (known !== undefined) return () => Promise.resolve(known);
    // Read now: a waiter has it by the time its turn comes.
    const stat = session.exists(path);
    stat.catch(noop);
    return async () => this.#tokens.fromStat(await stat, session, path, replyZxid);
  }
}
