import type { AcquireRequest, Grant, Lease, PermitRequest, RenewRequest, RenewResult } from '@dlock/core';
import { TransportError } from '@dlock/core';
import type { QueueDriver, Standing } from '@dlock/core/adapter';
import {
  type Attempt,
  AttemptIds,
  createQueueNode,
  type DriverDeps,
  queuePlace,
  sessionFor,
} from './attempts.js';
import { ZK_ERROR } from './errors.js';
import { type GrantRecord, Grants } from './grants.js';
import type { ParentUse } from './housekeeping.js';
import { freeSlot, permitQueuePath, permitSlotsPath, semaphorePath } from './keys.js';
import { childrenOf } from './node-ops.js';
import { PermitSlots, type SlotClaim, slotData } from './permit-slots.js';
import { predecessorGone, Waits } from './waits.js';
import type { MultiOp, Session, SessionNodes } from './zookeeper-session.js';

/**
 * One attempt to take a permit. Its queue node (if it needs one) is the `Attempt` part: an ephemeral sequential node
 * under the limit's queue parent, named with the attempt id as a lock's queue node is, so the session hand-over and
 * the leftovers treat it like one.
 */
export interface PermitClaim extends Attempt, SlotClaim {
  readonly request: PermitRequest;
  /** The claim counts as a user of its semaphore's node until it is granted or leaves. */
  usesSemaphore: boolean;
  lease: PermitRecord | undefined;
}

/** What a queued claim waits for: its predecessor to go, or (first in line) a slot to come free. */
export type PermitWait = { readonly predecessor: string } | { readonly slots: string };

/** One permit this process holds: its slot node (`parent` is the holders' parent). */
export interface PermitRecord extends GrantRecord {
  readonly slot: number;
  readonly attemptId: string;
  readonly semaphore: string;
  readonly fencingToken: bigint;
}

export interface ZooKeeperSemaphoreProtocolDeps extends DriverDeps {
  /** Semaphore nodes in use by this service (deleted once idle). */
  readonly semaphores: ParentUse;
}

/** Reads and writes of one enqueue that lost a race (a slot taken, a parent swept) before it stops trying to jump in. */
const MAX_ROUNDS = 8;

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
 *   `tryAcquire` never overtakes a waiter (`permit-slots.ts`). The queue parent is read first and deleted only
 *   with no data and the open ACL, at the version read; one with data or another ACL is kept, and a newcomer
 *   queues there first.
 * - Otherwise it queues. Only the first waiter watches the holders' parent; every later one watches its
 *   predecessor, so a release wakes one process. The first waiter takes the freed slot and deletes its queue node
 *   in one `multi`.
 * - Creates whose reply was lost are found again by the attempt id (queue nodes: in the name; slot nodes: in the data).
 */
export class ZooKeeperSemaphoreProtocol implements QueueDriver<PermitClaim, PermitWait> {
  /** The permits this driver granted: renewals, releases, and the service's tick, reconnect and session-end hooks. */
  readonly grants: Grants<PermitRecord>;
  /** The slot nodes; also what `availablePermits` reads. */
  readonly slots: PermitSlots<PermitClaim>;
  readonly #deps: ZooKeeperSemaphoreProtocolDeps;
  readonly #waits: Waits;
  readonly #attempts = new AttemptIds();

  constructor(deps: ZooKeeperSemaphoreProtocolDeps) {
    this.#deps = deps;
    this.#waits = new Waits(deps);
    const slots = new PermitSlots<PermitClaim>(deps.root, deps.cleanup, (...args) => this.#grant(...args));
    this.slots = slots;
    this.grants = new Grants<PermitRecord>({
      ...deps,
      unuse: (record) => deps.semaphores.unuse(record.semaphore),
      // One `exists` per permit, pipelined: a slot node's name is not unique to its holder, so its czxid is compared.
      batches: (items) => items.map((item) => [item]),
      alive: async (_, [record]) => [await slots.isHeld(record as PermitRecord)],
      remove: (record) => slots.removeIfOurs(record.session, record.path, record.attemptId),
      removeLater: (record) => slots.removeLater(record.session, record.path, record.attemptId),
    });
  }

  /** Names the attempt and its limit's parents, without I/O: the id goes into every node it creates. */
  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): PermitClaim {
    const { permits } = request as PermitRequest;
    const semaphore = semaphorePath(this.#deps.root, request.name);
    return {
      request: request as PermitRequest,
      startedAt,
      attemptId: this.#attempts.next(),
      semaphore,
      permits,
      slots: permitSlotsPath(semaphore, permits),
      parent: permitQueuePath(semaphore, permits),
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
    const session = await sessionFor(claim, this.#deps.sessions, this.grants);
    this.#deps.semaphores.use(claim.semaphore);
    claim.usesSemaphore = true;
    session.hold(claim);
    // A queue parent with data or another ACL, which the take does not delete: a slot is taken from the head of the
    // queue only, even by a caller that does not wait (its node is deleted again if it is behind; see README).
    let foreign = false;
    for (let round = 0; ; round++) {
      if (round < MAX_ROUNDS && !foreign) {
        const taken = await this.slots.tryTake(claim, session);
        if (typeof taken === 'object') return { kind: 'first', grant: taken.grant };
        if (taken === 'again') continue;
        foreign = taken === 'foreign';
      }
      if (!queue && !foreign) return { kind: 'behind', wait: { slots: claim.slots } };
      const entry = await createQueueNode(session, claim, slotData(claim), {
        cleanup: this.#deps.cleanup,
        noParent: async () => false,
        recoverListing: true,
      });
      if (entry) return this.#standing(claim, session, await entry.children);
      foreign = false;
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
   * Waits for the predecessor's node to go, or, first in line, for a change among the holders (a child watch on
   * their parent, set with the listing that shows every slot held). Returns at once if that has already happened.
   */
  wait(claim: PermitClaim, wait: PermitWait, ms: number, signal: AbortSignal): Promise<undefined> {
    const session = claim.session as Session;
    return this.#waits.wait(session, ms, signal, async (watcher) => {
      if ('predecessor' in wait) return predecessorGone(session, wait.predecessor, watcher);
      const held = await childrenOf(session, wait.slots, watcher);
      return held === undefined || freeSlot(held, claim.permits) !== undefined;
    });
  }

  /** The service is closing: every waiting claim stops waiting. */
  stopWaiting(): void {
    this.#waits.stopAll();
  }

  /**
   * Deletes the claim's queue node and gives back a slot it was granted or may hold (after a create that went
   * unanswered; only if the node's data names this attempt). A session that ended hands them over.
   */
  async leave(claim: PermitClaim): Promise<void> {
    const session = claim.session;
    if (!session) return;
    const record = claim.lease;
    if (record) {
      this.grants.forget(record);
      claim.lease = undefined;
      claim.unsureSlots.add(record.slot);
    }
    if (claim.usesSemaphore) {
      claim.usesSemaphore = false;
      this.#deps.semaphores.unuse(claim.semaphore);
    }
    await this.#deps.cleanup.remove(session, claim, () => this.slots.removeUnsure(session, claim));
    // The session ended before or while the slots were deleted: the queue node was handed over, these follow.
    if (session.ended) this.slots.handOverUnsure(session, claim);
  }

  /** Checks that the permit's slot node still exists, in its session, with its czxid. */
  renew(request: RenewRequest): Promise<RenewResult> {
    return this.grants.renew(request, (record) => this.slots.isHeld(record));
  }

  /** One `exists` per permit, all sent at once (pipelined on the session's connection). */
  renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return Promise.all(requests.map((request) => this.renew(request)));
  }

  /** Deletes the permit's slot node (`Grants.release`; in the background only after checking it is still this one). */
  release(lease: Lease): Promise<boolean> {
    return this.grants.release(lease);
  }

  /**
   * Every permit of an ended session is lost, at once. (Its queue nodes are pending nodes: see the lock driver.) The
   * slots a claim still on the session may hold go to the leftovers now, not when its leave runs next: `close()`
   * ends the session and then stops the background retries, and a caller's client keeps the session, and with it
   * such a slot, for as long as it lives. Called before the lock driver's, which lets go of the pending claims.
   */
  sessionEnded(session: Session): void {
    for (const nodes of session.pending) {
      if (isPermitClaim(nodes)) this.slots.handOverUnsure(session, nodes);
    }
    const tokens = this.grants.sessionEnded(session);
    this.#waits.sessionEnded(session);
    if (tokens.length > 0) this.#deps.lost(tokens);
  }

  /** Where the claim stands in the queue; the first one takes a free slot, deleting its queue node in the same step. */
  async #standing(
    claim: PermitClaim,
    session: Session,
    children: readonly string[],
  ): Promise<Standing<PermitWait>> {
    const place = queuePlace(claim, session, children, this.#deps.cleanup);
    if (place !== 'head') return place;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const held = await childrenOf(session, claim.slots);
      if (held === undefined) return { kind: 'gone' };
      const slot = freeSlot(held, claim.permits);
      if (slot === undefined) break;
      let gone = false;
      // The queue node goes in the same step as the slot is taken: never both, never neither.
      const remove: MultiOp[] = [{ op: 'remove', path: `${claim.parent}/${claim.node}` }];
      const taken = await this.slots.take(claim, session, slot, remove, (failed, code) => {
        gone = failed === 0 && code === ZK_ERROR.NO_NODE;
      });
      if (typeof taken === 'object') {
        claim.node = undefined;
        return { kind: 'first', grant: taken.grant };
      }
      if (session.endError) throw session.endError;
      if (gone) return { kind: 'gone' };
    }
    return { kind: 'behind', wait: { slots: claim.slots } };
  }

  #grant(claim: PermitClaim, session: Session, slot: number, fencingToken: bigint): Grant {
    const token = `${slot}-${claim.attemptId}`;
    const path = `${claim.slots}/${slot}`;
    const { name } = claim.request;
    const record: PermitRecord = {
      name,
      slot,
      token,
      parent: claim.slots,
      path,
      session,
      confirmedAt: session.lastContactAt,
      attemptId: claim.attemptId,
      semaphore: claim.semaphore,
      fencingToken,
    };
    this.grants.add(record);
    session.letGo(claim);
    claim.lease = record;
    this.slots.dropUnsure(session, claim, slot);
    // The permit uses the semaphore's node now, until it is forgotten.
    claim.usesSemaphore = false;
    const queuedMs = Math.max(0, session.lastContactAt - claim.startedAt);
    return { ownershipToken: token, fencingToken, ttlMs: session.timeoutMs, queuedMs, slot };
  }
}

function isPermitClaim(nodes: SessionNodes): nodes is PermitClaim {
  return 'unsureSlots' in nodes;
}
