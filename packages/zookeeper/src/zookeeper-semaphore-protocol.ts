import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type Clock,
  type Grant,
  type Lease,
  type PermitRequest,
  PermitsMismatchError,
  type RenewRequest,
  type RenewResult,
  TransportError,
  UnsupportedError,
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
import {
  attemptPrefix,
  decodeLockName,
  encodeLockName,
  freeSlot,
  heldSlots,
  isNodeOfAttempt,
  limitOf,
  permitQueuePath,
  permitSlotsPath,
  queueOrder,
  semaphorePath,
  semaphoresRootPath,
} from './keys.js';
import type { Leftovers } from './leftovers.js';
import { decodePermitData, encodePermitData } from './node-data.js';
import {
  czxidOf,
  isConnectionLoss,
  type MultiOp,
  type MultiOutcome,
  type NodeRead,
  ownerOf,
  type Session,
  type SessionNodes,
} from './zookeeper-session.js';
import type { Sessions } from './zookeeper-sessions.js';

/**
 * One attempt to take a permit. Its queue node (if it needs one) is the `SessionNodes` part: an ephemeral
 * sequential node under the limit's queue parent, named with the attempt id as a lock's queue node is, so the
 * session hand-over and the leftovers treat it like one.
 */
export interface PermitClaim extends SessionNodes {
  readonly request: PermitRequest;
  readonly startedAt: number;
  readonly attemptId: string;
  /** The semaphore's node. */
  readonly semaphore: string;
  readonly permits: number;
  /** The holders' parent for this limit. */
  readonly slots: string;
  session: Session | undefined;
  /** The claim counts as a user of its semaphore's node until it is granted or leaves. */
  usesSemaphore: boolean;
  /**
   * Slots whose create went out for this claim without an answer: the claim may hold them (a server that was
   * behind can show such a node only later), so each is deleted once the claim no longer needs it, if its data
   * names this attempt.
   */
  readonly unsureSlots: Set<number>;
  lease: PermitRecord | undefined;
}

/** What a queued claim waits for: its predecessor to go, or (first in line) a slot to come free. */
export type PermitWait = { readonly predecessor: string } | { readonly slots: string };

/** One permit this process holds: its slot node and when the server last confirmed it. */
export interface PermitRecord {
  readonly name: string;
  readonly slot: number;
  /** The grant's ownership token: `<slot>-<attempt id>`. */
  readonly token: string;
  readonly attemptId: string;
  readonly semaphore: string;
  readonly permits: number;
  readonly path: string;
  readonly session: Session;
  readonly fencingToken: bigint;
  /** Send time of the last request that proved the node alive; the permit is reaped a session timeout later. */
  confirmedAt: number;
}

interface Waiting {
  readonly session: Session;
  readonly notify: () => void;
}

export interface ZooKeeperSemaphoreProtocolDeps {
  readonly clock: Clock;
  readonly deadlines: CallDeadlines;
  readonly root: string;
  readonly sessions: Sessions;
  /** Semaphore nodes in use by this service (deleted once idle). */
  readonly semaphores: ParentUse;
  readonly leftovers: Leftovers;
  readonly cleanups: BackgroundRetries;
  readonly closing: AbortSignal;
  readonly lost: (ownershipTokens: readonly string[]) => void;
}

const NOT_RENEWED: RenewResult = Object.freeze({ renewed: false });
const GONE: Standing<PermitWait> = Object.freeze({ kind: 'gone' });
const EMPTY = Buffer.alloc(0);
const EMPTY_SET: ReadonlySet<PermitRecord> = new Set();
/** Reads and writes of one enqueue that lost a race (a slot taken, a parent swept) before it stops trying to jump in. */
const MAX_ROUNDS = 8;
/** How long a failing delete is retried while its session lives (as for locks). */
const CLEANUP_MS = 30_000;
const noop = (): void => {};

type Taken = { readonly grant: Grant } | 'queued' | 'again';

/**
 * A counting semaphore on ZooKeeper, as core's queue driver. Node layout, under `<keyPrefix>/.semaphores/<name>`:
 *
 *   queue-<permits>/_c_<attempt id>-<sequence>   waiters, ephemeral sequential (FIFO by sequence number)
 *   slots-<permits>/<slot>                       holders, ephemeral, one node per held slot 0 … permits − 1
 *
 * - A slot is held while its node exists; ZooKeeper's NodeExists is what keeps a slot to one holder, and the
 *   node's czxid (restart-safe, ensemble-wide, rising) is the permit's fencing token: strictly increasing per slot.
 * - The limit is in the two parents' names. Only one pair exists at a time, swapped for another limit in one
 *   `multi` that deletes the old pair (NotEmpty while anyone holds or waits: `PermitsMismatchError`). A write for a
 *   stale limit fails with NoNode: no two limits are ever in use together.
 * - A newcomer takes a free slot at once only if nobody waits, in one `multi` that deletes and re-creates the empty
 *   queue parent (NotEmpty if someone queued) and creates the slot node: the check and the take are atomic, so a
 *   `tryAcquire` never overtakes a waiter.
 * - Otherwise it queues. Only the first waiter watches the holders' parent; every later one watches its
 *   predecessor, so a release wakes one process. The first waiter takes the freed slot and deletes its queue node
 *   in one `multi`.
 * - Creates whose reply was lost are found again by the attempt id (queue nodes: in the name; slot nodes: in the data).
 */
export class ZooKeeperSemaphoreProtocol implements QueueDriver<PermitClaim, PermitWait> {
  readonly #deps: ZooKeeperSemaphoreProtocolDeps;
  readonly #clock: Clock;
  readonly #records = new Map<string, PermitRecord>();
  /** The same records by session: what a tick, a reconnect or a session's end looks at. */
  readonly #bySession = new Map<Session, Set<PermitRecord>>();
  readonly #waiting = new Set<Waiting>();
  /** Whether a multi's reply zxid is the created node's czxid: checked once against `exists`, then trusted. */
  #replyZxidTrusted: boolean | undefined;
  readonly #attemptPrefix = randomBytes(10).toString('hex');
  #attempts = 0;
  #rootReady = false;
  /** Clients whose transactions can create and delete (a caller's wrapped client might not). */
  readonly #multiCapable = new WeakSet<object>();

  constructor(deps: ZooKeeperSemaphoreProtocolDeps) {
    this.#deps = deps;
    this.#clock = deps.clock;
  }

  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): PermitClaim {
    const permitRequest = request as PermitRequest;
    const semaphore = semaphorePath(this.#deps.root, request.name);
    this.#attempts += 1;
    return {
      request: permitRequest,
      startedAt,
      attemptId: this.#attemptPrefix + this.#attempts.toString(16).padStart(12, '0'),
      semaphore,
      permits: permitRequest.permits,
      slots: permitSlotsPath(semaphore, permitRequest.permits),
      parent: permitQueuePath(semaphore, permitRequest.permits),
      node: undefined,
      uncertain: false,
      giveUpAt: undefined,
      session: undefined,
      usesSemaphore: false,
      unsureSlots: new Set(),
      lease: undefined,
    };
  }

  /**
   * Takes a free slot at once when nobody waits; otherwise (with `queue`) creates the claim's queue node and says
   * where it stands. Sets the semaphore up, or switches an idle one to this limit, on the way.
   */
  async enqueue(claim: PermitClaim, { queue }: { readonly queue: boolean }): Promise<Standing<PermitWait>> {
    const { sessions, semaphores } = this.#deps;
    const session = sessions.current ?? (await sessions.live(claim.request.signal));
    if (this.#hasRecords(session)) await this.reapOverdue(session);
    claim.session = session;
    semaphores.use(claim.semaphore);
    claim.usesSemaphore = true;
    session.hold(claim);
    for (let round = 0; ; round++) {
      if (round < MAX_ROUNDS) {
        const taken = await this.#tryTake(claim, session);
        if (typeof taken === 'object') return { kind: 'first', grant: taken.grant };
        if (taken === 'again') continue;
      }
      if (!queue) return { kind: 'behind', wait: { slots: claim.slots } };
      const children = await this.#createQueueNode(claim, session);
      if (children) return this.#standing(claim, session, children);
      // The limit's parents went (swept, or switched to another limit) before the queue node was made: look again.
      if (round >= 2 * MAX_ROUNDS)
        throw new TransportError(`the semaphore ${claim.semaphore} keeps changing`);
    }
  }

  /** Lists the queue: the claim's standing is where its node is; the first one takes a free slot. */
  async check(claim: PermitClaim): Promise<Standing<PermitWait>> {
    const session = claim.session as Session;
    return this.#standing(claim, session, (await childrenOf(session, claim.parent)) ?? []);
  }

  /**
   * Waits for the predecessor's node to go (a data watch, as for locks), or, first in line, for a change among the
   * holders (a child watch on their parent, set with the listing that shows every slot held). Returns at once if
   * what it would wait for has already happened; rejects when the caller's signal aborts or the service closes.
   */
  async wait(claim: PermitClaim, wait: PermitWait, ms: number, signal: AbortSignal): Promise<undefined> {
    const session = claim.session as Session;
    const { clock, closing } = this.#deps;
    if (closing.aborted) throw closing.reason;
    const until = clock.monotonic() + ms;
    const wake = new WakeSignal();
    let woken = false;
    const waiting: Waiting = {
      session,
      notify: () => {
        woken = true;
        wake.notify();
      },
    };
    this.#waiting.add(waiting);
    const over = async (watch: boolean): Promise<boolean> => {
      if ('predecessor' in wait) {
        return (
          (await (watch
            ? session.watchNode(wait.predecessor, waiting.notify)
            : session.exists(wait.predecessor))) === null
        );
      }
      const held = await childrenOf(session, wait.slots, watch ? waiting.notify : undefined);
      return held === undefined || freeSlot(held, claim.permits) !== undefined;
    };
    try {
      if (await over(true)) return undefined;
      // A watch lost to a client bug must not strand a waiter: look again now and then.
      const recheckMs = Math.max(1_000, session.timeoutMs);
      for (;;) {
        if (closing.aborted) throw closing.reason;
        const left = until - clock.monotonic();
        if (left <= 0) return undefined;
        await wake.wait(clock, Math.min(left, recheckMs), signal, this.#deps.deadlines);
        if (closing.aborted) throw closing.reason;
        if (woken || clock.monotonic() >= until) return undefined;
        if (await over(false)) return undefined;
      }
    } finally {
      this.#waiting.delete(waiting);
    }
  }

  /** The service is closing: every waiting claim stops waiting. */
  stopWaiting(): void {
    for (const waiting of [...this.#waiting]) waiting.notify();
  }

  /**
   * Deletes the claim's queue node and gives back a slot it was granted (or may hold, after a create that went
   * unanswered). NoNode counts as done; a session that ended hands its queue node to the leftovers.
   */
  async leave(claim: PermitClaim): Promise<void> {
    const session = claim.session;
    if (!session) return;
    const record = claim.lease;
    if (record) {
      this.#forget(record);
      claim.lease = undefined;
      claim.unsureSlots.add(record.slot);
    }
    if (claim.usesSemaphore) {
      claim.usesSemaphore = false;
      this.#deps.semaphores.unuse(claim.semaphore);
    }
    await this.#remove(session, claim);
  }

  /** Checks that the permit's slot node still exists, in its session, with its czxid. */
  async renew(request: RenewRequest): Promise<RenewResult> {
    const record = this.#lookup(request.lease);
    if (!record) return NOT_RENEWED;
    const sentAt = this.#clock.monotonic();
    return this.#confirm(record, await this.#alive(record), sentAt);
  }

  /**
   * One `exists` per permit, all sent at once (pipelined on the session's connection). Not a `multi` of checks as
   * for locks: a slot node's name is not unique to its holder, so its czxid has to be compared.
   */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return Promise.all(requests.map((request) => this.renew(request)));
  }

  /**
   * Deletes the permit's slot node: true if this call did, false if there was nothing of it to delete. Rejects only
   * when the outcome is unknown; the node is then deleted in the background (after checking it is still this one).
   */
  async release(lease: Lease): Promise<boolean> {
    const record = this.#lookup(lease);
    if (!record) return false;
    this.#forget(record);
    try {
      // The node is this permit's: its session lives, and nobody else can create that slot while it exists.
      await record.session.remove(record.path);
      return true;
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return false;
      this.#removeSlotLater(record.session, record.path, record.attemptId);
      if (record.session.ended) return false;
      throw error;
    }
  }

  /**
   * Slots free right now: `permits` minus the held slot nodes. Throws `PermitsMismatchError` when the semaphore's
   * holders or waiters run with another limit.
   */
  async available(name: string, permits: number): Promise<number> {
    const session = this.#deps.sessions.current ?? (await this.#deps.sessions.live());
    const semaphore = semaphorePath(this.#deps.root, name);
    const held = await childrenOf(session, permitSlotsPath(semaphore, permits));
    if (held !== undefined) return Math.max(0, permits - heldSlots(held, permits));
    for (const child of (await childrenOf(session, semaphore)) ?? []) {
      const other = limitOf(child);
      if (other === undefined || other === permits) continue;
      const stat = await session.exists(`${semaphore}/${child}`);
      if (stat && (stat.numChildren ?? 1) > 0) throw new PermitsMismatchError(name, permits, other);
    }
    return permits;
  }

  hasRecords(session: Session): boolean {
    return this.#hasRecords(session);
  }

  /** After a reconnect under the same session: checks every permit of it at once and reports those that are gone. */
  async verify(session: Session): Promise<void> {
    const records = [...this.#recordsOf(session)];
    if (records.length === 0 || session.ended) return;
    const gone: string[] = [];
    await Promise.all(
      records.map(async (record) => {
        const sentAt = this.#clock.monotonic();
        let alive: boolean;
        try {
          alive = await this.#alive(record);
        } catch {
          return;
        }
        if (this.#records.get(record.token) !== record) return;
        if (alive) {
          if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
          return;
        }
        this.#forget(record);
        gone.push(record.token);
      }),
    );
    if (gone.length > 0) this.#deps.lost(gone);
  }

  /** Deletes permits nobody renewed for a whole session timeout, as a TTL service would let them expire. */
  async reapOverdue(session: Session): Promise<void> {
    const now = this.#clock.monotonic();
    const reaped: Promise<void>[] = [];
    for (const record of this.#recordsOf(session)) {
      if (now - record.confirmedAt >= session.timeoutMs) {
        reaped.push(this.#reap(record));
      }
    }
    if (reaped.length > 0) await Promise.all(reaped);
  }

  /**
   * Every permit of an ended session is lost, at once; a caller's client may keep the session, so its slot nodes
   * go to the leftovers. (Queue nodes are the session's pending nodes: the lock protocol hands those over.)
   */
  sessionEnded(session: Session): void {
    const tokens: string[] = [];
    for (const record of [...this.#recordsOf(session)]) {
      tokens.push(record.token);
      this.#forget(record);
      if (!session.owned)
        this.#deps.leftovers.add(
          session,
          permitSlotsPath(record.semaphore, record.permits),
          record.path,
          undefined,
        );
    }
    for (const waiting of [...this.#waiting]) if (waiting.session === session) waiting.notify();
    if (tokens.length > 0) this.#deps.lost(tokens);
  }

  /**
   * Deletes an idle semaphore's node with its two parents, in one `multi`: NotEmpty (someone holds or waits again)
   * or NoNode (someone else deleted it) leave everything as it is.
   */
  removeIdle(session: Session, semaphore: string): Promise<void> {
    return removeIdleSemaphore(session, semaphore);
  }

  // ------------------------------------------------------------------------------------------------ acquiring

  /**
   * Reads the holders' parent and, with a slot free, takes it if nobody waits. `again` after a lost race (the slot
   * was taken meanwhile, the parents went or were made by someone else); `queued` when someone waits or every slot
   * is held.
   */
  async #tryTake(claim: PermitClaim, session: Session): Promise<Taken> {
    const held = await childrenOf(session, claim.slots);
    if (held === undefined) return this.#setUp(claim, session);
    const slot = freeSlot(held, claim.permits);
    if (slot === undefined) return 'queued';
    // Deleting the queue parent fails with NotEmpty if anyone waits: the check and the take are one step.
    return this.#take(claim, session, slot, [
      { op: 'remove', path: claim.parent },
      { op: 'create', path: claim.parent, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
    ]);
  }

  /**
   * The limit's parents are missing: create them (and the semaphore's node) with slot 0 taken, deleting the parents
   * of another limit in the same `multi`. Those are deleted only if empty, so a semaphore in use with another limit
   * refuses with `PermitsMismatchError`.
   */
  async #setUp(claim: PermitClaim, session: Session): Promise<Taken> {
    const { semaphore, permits } = claim;
    const children = await childrenOf(session, semaphore);
    const ops: MultiOp[] = [];
    const others: number[] = [];
    if (children === undefined) {
      if (!this.#rootReady) await this.#ensureSemaphoresRoot(session);
      ops.push({ op: 'create', path: semaphore, data: EMPTY, mode: CREATE_MODE.PERSISTENT });
    } else {
      for (const child of children) {
        const limit = limitOf(child);
        if (limit === undefined) continue;
        const path = `${semaphore}/${child}`;
        if (path === claim.slots) return 'again'; // made by someone else since the read
        // The queue parent without its holders' parent (deleted by hand) is re-made, empty or NotEmpty as any take.
        ops.push({ op: 'remove', path });
        if (limit !== permits) others.push(limit);
      }
    }
    ops.push(
      { op: 'create', path: claim.parent, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
      { op: 'create', path: claim.slots, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
    );
    const taken = await this.#take(claim, session, 0, ops, (failed, code) => {
      const op = ops[failed];
      if (code === ZK_ERROR.NOT_EMPTY && op?.op === 'remove' && op.path !== claim.parent) {
        const other = limitOf(op.path.slice(semaphore.length + 1)) ?? others[0] ?? 0;
        throw new PermitsMismatchError(claim.request.name, permits, other);
      }
      if (code === ZK_ERROR.NO_NODE && op?.op === 'create' && op.path === semaphore) this.#rootReady = false;
    });
    return taken;
  }

  /**
   * Creates the slot node (with `before` in the same `multi`) and makes the grant. A create whose reply was lost is
   * looked for by the attempt id in the node's data; `refused` may throw for a refusal that is an answer.
   */
  async #take(
    claim: PermitClaim,
    session: Session,
    slot: number,
    before: readonly MultiOp[],
    refused?: (failed: number, code: number | undefined) => void,
  ): Promise<Taken> {
    const path = `${claim.slots}/${slot}`;
    this.#assertMulti(session);
    const ops: MultiOp[] = [
      ...before,
      { op: 'create', path, data: this.#nodeData(claim), mode: CREATE_MODE.EPHEMERAL },
    ];
    let outcome: MultiOutcome;
    try {
      outcome = await session.multi(ops, (late) => {
        // Committed after the call gave up on it: a slot nobody holds, unless deleted.
        if (late.ok) this.#removeSlotLater(session, path, claim.attemptId);
      });
    } catch (error) {
      if (error instanceof TransportError) claim.unsureSlots.add(slot);
      if (!isConnectionLoss(error)) throw error;
      const read = await session.readNode(path);
      if (!this.#isOurs(read, session, claim.attemptId)) return 'again';
      return { grant: this.#grant(claim, session, slot, czxidOf(read.stat)) };
    }
    if (outcome.ok)
      return { grant: this.#grant(claim, session, slot, await this.#token(session, path, outcome.zxid)) };
    if (outcome.failed !== undefined) refused?.(outcome.failed, outcome.code);
    const failedOp = outcome.failed === undefined ? undefined : ops[outcome.failed];
    // Someone waits: the queue parent is not empty.
    if (outcome.code === ZK_ERROR.NOT_EMPTY && failedOp?.op === 'remove' && failedOp.path === claim.parent) {
      return 'queued';
    }
    if (outcome.code === ZK_ERROR.NO_NODE && failedOp?.op === 'remove' && failedOp.path === claim.parent) {
      // The holders' parent without the queue parent (deleted by hand): make it, then look again.
      await createPersistent(session, claim.parent);
      return 'again';
    }
    if (outcome.code === ZK_ERROR.NODE_EXISTS || outcome.code === ZK_ERROR.NO_NODE) return 'again';
    throw new TransportError(`ZooKeeper refused to take slot ${path} (error ${String(outcome.code)})`);
  }

  /**
   * Creates the claim's queue node and lists the queue right after (pipelined). Undefined when the queue parent is
   * gone. A create whose reply was lost is looked for by the attempt id in the node names.
   */
  async #createQueueNode(claim: PermitClaim, session: Session): Promise<string[] | undefined> {
    const { parent, attemptId } = claim;
    const data = this.#nodeData(claim);
    for (let round = 0; ; round++) {
      const created = session.create(
        attemptPrefix(parent, attemptId),
        data,
        CREATE_MODE.EPHEMERAL_SEQUENTIAL,
        (late) => this.#removeLater(session, nodesAt(parent, late.path.slice(parent.length + 1))),
      );
      const listed = session.getChildren(parent);
      listed.catch(noop);
      try {
        const { path } = await created;
        claim.node = path.slice(parent.length + 1);
        return await listed;
      } catch (error) {
        if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return undefined;
        if (error instanceof TransportError) claim.uncertain = true;
        if (!isConnectionLoss(error) || round >= 4) throw error;
        const children = (await childrenOf(session, parent)) ?? [];
        const found = children.find((child) => isNodeOfAttempt(child, attemptId));
        if (found !== undefined) {
          claim.node = found;
          return children;
        }
      }
    }
  }

  /** Where the claim stands in the queue; the first one takes a free slot, deleting its queue node in the same step. */
  async #standing(
    claim: PermitClaim,
    session: Session,
    children: readonly string[],
  ): Promise<Standing<PermitWait>> {
    const queue = queueOrder(children);
    const ours = claim.node as string;
    const index = queue.indexOf(ours);
    if (index < 0) {
      if (session.endError) throw session.endError;
      return GONE;
    }
    if (claim.uncertain) this.#dropDuplicates(claim, session, queue);
    if (index > 0) return { kind: 'behind', wait: { predecessor: `${claim.parent}/${queue[index - 1]}` } };
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const held = await childrenOf(session, claim.slots);
      if (held === undefined) return GONE;
      const slot = freeSlot(held, claim.permits);
      if (slot === undefined) break;
      let gone = false;
      // The queue node goes in the same step as the slot is taken: never both, never neither.
      const taken = await this.#take(
        claim,
        session,
        slot,
        [{ op: 'remove', path: `${claim.parent}/${ours}` }],
        (failed, code) => {
          gone = failed === 0 && code === ZK_ERROR.NO_NODE;
        },
      );
      if (typeof taken === 'object') {
        claim.node = undefined;
        return { kind: 'first', grant: taken.grant };
      }
      if (session.endError) throw session.endError;
      if (gone) return GONE;
    }
    return { kind: 'behind', wait: { slots: claim.slots } };
  }

  #grant(claim: PermitClaim, session: Session, slot: number, fencingToken: bigint): Grant {
    const token = `${slot}-${claim.attemptId}`;
    const record: PermitRecord = {
      name: claim.request.name,
      slot,
      token,
      attemptId: claim.attemptId,
      semaphore: claim.semaphore,
      permits: claim.permits,
      path: `${claim.slots}/${slot}`,
      session,
      fencingToken,
      confirmedAt: session.lastContactAt,
    };
    this.#records.set(token, record);
    const ofSession = this.#bySession.get(session);
    if (ofSession) ofSession.add(record);
    else this.#bySession.set(session, new Set([record]));
    session.engage();
    session.letGo(claim);
    claim.lease = record;
    for (const unsure of claim.unsureSlots) {
      if (unsure !== slot) this.#removeSlotLater(session, `${claim.slots}/${unsure}`, claim.attemptId);
    }
    claim.unsureSlots.clear();
    // The permit uses the semaphore's node now, until it is forgotten.
    claim.usesSemaphore = false;
    return {
      ownershipToken: token,
      fencingToken,
      ttlMs: session.timeoutMs,
      queuedMs: Math.max(0, session.lastContactAt - claim.startedAt),
      slot,
    };
  }

  /** The czxid of a slot node this session just created: the multi's reply zxid once that is trusted. */
  async #token(session: Session, path: string, replyZxid: bigint | undefined): Promise<bigint> {
    if (replyZxid !== undefined && this.#replyZxidTrusted === true) return replyZxid;
    const stat = await session.exists(path);
    if (stat === null || ownerOf(stat) !== session.id) {
      throw new TransportError(`the slot node ${path} does not belong to this session`);
    }
    const czxid = czxidOf(stat);
    if (replyZxid !== undefined && this.#replyZxidTrusted === undefined) {
      this.#replyZxidTrusted = replyZxid === czxid;
    }
    return czxid;
  }

  #isOurs(read: NodeRead | null, session: Session, attemptId: string): read is NodeRead {
    if (read === null) return false;
    return ownerOf(read.stat) === session.id && decodePermitData(read.data)?.attempt === attemptId;
  }

  #nodeData(claim: PermitClaim): Buffer {
    const { ownerId, metadata } = claim.request;
    const record = { permits: claim.permits, owner: ownerId, attempt: claim.attemptId };
    return encodePermitData(metadata === undefined ? record : { ...record, metadata });
  }

  /** Once per client: a transaction object is made only to look at it. */
  #assertMulti(session: Session): void {
    if (this.#multiCapable.has(session.client)) return;
    const transaction = session.client.transaction();
    if (typeof transaction.create === 'function' && typeof transaction.remove === 'function') {
      this.#multiCapable.add(session.client);
    } else {
      throw new UnsupportedError(
        'the ZooKeeper client passed in has no transaction create/remove, which semaphores need',
      );
    }
  }

  async #ensureSemaphoresRoot(session: Session): Promise<void> {
    const path = semaphoresRootPath(this.#deps.root);
    const segments = path.slice(1).split('/');
    for (let i = 1; i <= segments.length; i++) {
      try {
        await session.create(`/${segments.slice(0, i).join('/')}`, EMPTY, CREATE_MODE.PERSISTENT);
      } catch (error) {
        if (zkErrorCode(error) !== ZK_ERROR.NODE_EXISTS) throw error;
      }
    }
    this.#rootReady = true;
  }

  // ------------------------------------------------------------------------------------------------ removing

  /**
   * Deletes the claim's queue node (and every node of its attempt if a create went unanswered) and a slot node it
   * holds or may hold (only if the node's data names this attempt). Retried by core until `CLEANUP_MS` after the
   * first failure; a session that ended hands the queue node over.
   */
  async #remove(session: Session, claim: PermitClaim): Promise<void> {
    if (session.ended) {
      this.#handOver(session, claim);
      return;
    }
    session.hold(claim);
    try {
      if (claim.node !== undefined) await removeNode(session, `${claim.parent}/${claim.node}`);
      if (claim.uncertain) {
        const mine = ((await childrenOf(session, claim.parent)) ?? []).filter((c) =>
          isNodeOfAttempt(c, claim.attemptId),
        );
        await Promise.all(mine.map((child) => removeNode(session, `${claim.parent}/${child}`)));
      }
      for (const unsure of [...claim.unsureSlots]) {
        await this.#removeSlotIfOurs(session, `${claim.slots}/${unsure}`, claim.attemptId);
        claim.unsureSlots.delete(unsure);
      }
    } catch (error) {
      if (session.ended) {
        this.#handOver(session, claim);
        return;
      }
      const now = this.#clock.monotonic();
      claim.giveUpAt ??= now + CLEANUP_MS;
      if (now < claim.giveUpAt) throw error;
    }
    session.letGo(claim);
  }

  /** A slot node is deleted only after reading that it is still the one this attempt made. */
  async #removeSlotIfOurs(session: Session, path: string, attemptId: string): Promise<void> {
    const read = await session.readNode(path);
    if (!this.#isOurs(read, session, attemptId)) return;
    await removeNode(session, path);
  }

  #removeSlotLater(session: Session, path: string, attemptId: string): void {
    const giveUpAt = this.#clock.monotonic() + CLEANUP_MS;
    this.#deps.cleanups.run(async () => {
      if (session.ended) return;
      try {
        await this.#removeSlotIfOurs(session, path, attemptId);
      } catch (error) {
        if (!session.ended && this.#clock.monotonic() < giveUpAt) throw error;
      }
    }, Number.POSITIVE_INFINITY);
  }

  #removeLater(session: Session, nodes: SessionNodes): void {
    this.#deps.cleanups.run(async () => {
      if (session.ended) return this.#handOver(session, nodes);
      session.hold(nodes);
      try {
        if (nodes.node !== undefined) await removeNode(session, `${nodes.parent}/${nodes.node}`);
      } catch (error) {
        if (session.ended) return this.#handOver(session, nodes);
        const now = this.#clock.monotonic();
        nodes.giveUpAt ??= now + CLEANUP_MS;
        if (now < nodes.giveUpAt) throw error;
      }
      session.letGo(nodes);
    }, Number.POSITIVE_INFINITY);
  }

  #handOver(session: Session, nodes: SessionNodes): void {
    session.letGo(nodes);
    if (session.owned) return;
    const path = nodes.node === undefined ? undefined : `${nodes.parent}/${nodes.node}`;
    const attemptId = nodes.uncertain ? nodes.attemptId : undefined;
    if (path !== undefined || attemptId !== undefined) {
      this.#deps.leftovers.add(session, nodes.parent, path, attemptId);
    }
  }

  #dropDuplicates(claim: PermitClaim, session: Session, queue: readonly string[]): void {
    for (const child of queue) {
      if (child !== claim.node && isNodeOfAttempt(child, claim.attemptId)) {
        this.#removeLater(session, nodesAt(claim.parent, child));
      }
    }
  }

  // ------------------------------------------------------------------------------------------------ records

  #hasRecords(session: Session): boolean {
    return this.#bySession.has(session);
  }

  #recordsOf(session: Session): ReadonlySet<PermitRecord> {
    return this.#bySession.get(session) ?? EMPTY_SET;
  }

  #lookup(lease: Lease): PermitRecord | undefined {
    const record = this.#records.get(lease.ownershipToken);
    if (!record || record.name !== lease.name || record.slot !== lease.slot) return undefined;
    if (record.session.ended) {
      this.#forget(record);
      return undefined;
    }
    return record;
  }

  #forget(record: PermitRecord): void {
    if (this.#records.get(record.token) !== record) return;
    this.#records.delete(record.token);
    const ofSession = this.#bySession.get(record.session);
    ofSession?.delete(record);
    if (ofSession?.size === 0) this.#bySession.delete(record.session);
    record.session.disengage();
    this.#deps.semaphores.unuse(record.semaphore);
  }

  async #alive(record: PermitRecord): Promise<boolean> {
    const stat = await record.session.exists(record.path);
    return stat !== null && ownerOf(stat) === record.session.id && czxidOf(stat) === record.fencingToken;
  }

  #confirm(record: PermitRecord, alive: boolean, sentAt: number): RenewResult {
    if (!alive || record.session.ended || this.#records.get(record.token) !== record) {
      this.#forget(record);
      return NOT_RENEWED;
    }
    if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
    return { renewed: true, ttlMs: record.session.timeoutMs };
  }

  async #reap(record: PermitRecord): Promise<void> {
    if (this.#records.get(record.token) !== record) return;
    this.#forget(record);
    this.#deps.lost([record.token]);
    try {
      await this.#removeSlotIfOurs(record.session, record.path, record.attemptId);
    } catch {
      this.#removeSlotLater(record.session, record.path, record.attemptId);
    }
  }
}

/** See {@link ZooKeeperSemaphoreProtocol.removeIdle}. */
export async function removeIdleSemaphore(session: Session, semaphore: string): Promise<void> {
  const children = await childrenOf(session, semaphore);
  if (children === undefined) return;
  const ops: MultiOp[] = children.map((child) => ({ op: 'remove', path: `${semaphore}/${child}` }));
  ops.push({ op: 'remove', path: semaphore });
  await session.multi(ops);
}

/**
 * For the sweep of semaphores every process left behind: a stamp of a semaphore node with no holder and no waiter
 * (the pzxids of the node and of its empty parents, which change with every child created or deleted), or
 * undefined when it is in use or not a semaphore's node.
 */
export async function idleSemaphoreStamp(
  session: Session,
  semaphore: string,
  name: string,
): Promise<string | undefined> {
  const stat = await session.exists(semaphore);
  if (!stat || stat.pzxid === undefined || stat.dataLength !== 0) return undefined;
  if (stat.ephemeralOwner.some((byte) => byte !== 0) || !isEncodedName(name)) return undefined;
  const children = (await childrenOf(session, semaphore)) ?? [];
  if (children.length > 2 || children.some((child) => limitOf(child) === undefined)) return undefined;
  const stamps = [stat.pzxid.toString('hex')];
  for (const child of children) {
    const parent = await session.exists(`${semaphore}/${child}`);
    if (parent?.numChildren !== 0 || parent.pzxid === undefined) return undefined;
    stamps.push(parent.pzxid.toString('hex'));
  }
  return stamps.join(':');
}

function isEncodedName(name: string): boolean {
  try {
    return encodeLockName(decodeLockName(name)) === name;
  } catch {
    return false;
  }
}

function nodesAt(parent: string, node: string): SessionNodes {
  return { parent, node, attemptId: undefined, uncertain: false, giveUpAt: undefined };
}

async function removeNode(session: Session, path: string): Promise<void> {
  try {
    await session.remove(path);
  } catch (error) {
    if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
  }
}

/** Creates a persistent node; NodeExists and NoNode (its parent went meanwhile) are left to the next look. */
async function createPersistent(session: Session, path: string): Promise<void> {
  try {
    await session.create(path, EMPTY, CREATE_MODE.PERSISTENT);
  } catch (error) {
    const code = zkErrorCode(error);
    if (code !== ZK_ERROR.NODE_EXISTS && code !== ZK_ERROR.NO_NODE) throw error;
  }
}

/** A node's children (leaving a child watch when `watcher` is given); undefined if it does not exist. */
async function childrenOf(
  session: Session,
  parent: string,
  watcher?: () => void,
): Promise<string[] | undefined> {
  try {
    return await session.getChildren(parent, watcher);
  } catch (error) {
    if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return undefined;
    throw error;
  }
}
