import {
  type Grant,
  type PermitRequest,
  PermitsMismatchError,
  TransportError,
  UnsupportedError,
} from '@dlock/core';
import { CREATE_MODE } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { FencingTokens } from './fencing-tokens.js';
import { freeSlot, heldSlots, limitOf, permitSlotsPath, semaphorePath, semaphoresRootPath } from './keys.js';
import type { NodeCleanup } from './node-cleanup.js';
import { decodePermitData, encodePermitData } from './node-data.js';
import { childrenOf, EMPTY, removeNode } from './node-ops.js';
import {
  czxidOf,
  isConnectionLoss,
  type MultiOp,
  type MultiOutcome,
  type NodeRead,
  ownerOf,
  type Session,
} from './zookeeper-session.js';

/** What a take needs of a semaphore's claim. */
export interface SlotClaim {
  readonly request: PermitRequest;
  readonly attemptId: string;
  /** The semaphore's node, and under it the waiters' parent (the claim's queue) and the holders' parent. */
  readonly semaphore: string;
  readonly parent: string;
  readonly slots: string;
  readonly permits: number;
  /**
   * Slots whose create went out for this claim and did not end in a grant or a refusal: the claim may hold them (a
   * server that was behind can show such a node only later), so each is deleted once the claim no longer needs it,
   * if its data names this attempt.
   */
  readonly unsureSlots: Set<number>;
}

/** A take's outcome: the grant, someone waits (or every slot is held), or a lost race. */
export type Taken = { readonly grant: Grant } | 'queued' | 'again';

/** Makes the grant of a slot just taken (at once: nothing may come between the take and its record). */
export type GrantSlot<C> = (claim: C, session: Session, slot: number, fencingToken: bigint) => Grant;

/**
 * A semaphore's slot nodes, for its driver: the one `multi` that takes a slot (the check that nobody waits, the
 * queue node's delete or the limit's parents made in the same step), and a slot deleted only after reading that it
 * is still the one an attempt made (a slot node's name is not unique to its holder; its data names the attempt).
 */
export class PermitSlots<C extends SlotClaim> {
  readonly #root: string;
  readonly #cleanup: NodeCleanup;
  readonly #grant: GrantSlot<C>;
  readonly #tokens = new FencingTokens({ nodes: 'slot', warn: false });
  #rootReady = false;
  /** Clients whose transactions can create and delete (a caller's wrapped client might not). */
  readonly #multiCapable = new WeakSet<object>();

  constructor(root: string, cleanup: NodeCleanup, grant: GrantSlot<C>) {
    this.#root = root;
    this.#cleanup = cleanup;
    this.#grant = grant;
  }

  /**
   * Reads the holders' parent and, with a slot free, takes it if nobody waits: deleting the queue parent fails with
   * NotEmpty if anyone waits, so the check and the take are one step. `again` after a lost race (the slot was
   * taken meanwhile, the parents went or were made by someone else); `queued` when someone waits or every slot is
   * held.
   */
  async tryTake(claim: C, session: Session): Promise<Taken> {
    const held = await childrenOf(session, claim.slots);
    if (held === undefined) return this.#setUp(claim, session);
    const slot = freeSlot(held, claim.permits);
    if (slot === undefined) return 'queued';
    return this.take(claim, session, slot, [
      { op: 'remove', path: claim.parent },
      { op: 'create', path: claim.parent, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
    ]);
  }

  /**
   * Creates the slot node (with `before` in the same `multi`). A create whose reply was lost is looked for by the
   * attempt id in the node's data; `refused` may throw for a refusal that is an answer.
   */
  async take(
    claim: C,
    session: Session,
    slot: number,
    before: readonly MultiOp[],
    refused?: (failed: number, code: number | undefined) => void,
  ): Promise<Taken> {
    const path = `${claim.slots}/${slot}`;
    this.#assertMulti(session);
    const ops: MultiOp[] = [
      ...before,
      { op: 'create', path, data: slotData(claim), mode: CREATE_MODE.EPHEMERAL },
    ];
    // Unsure from the moment the create goes out until the grant is made: any step between (the multi's reply, the
    // token's read) can fail after the server committed, and the claim's leave must then find the slot. A refusal
    // takes it back, unless an earlier take of the same slot left it unsure.
    const unsureBefore = claim.unsureSlots.has(slot);
    claim.unsureSlots.add(slot);
    let outcome: MultiOutcome;
    try {
      outcome = await session.multi(ops, (late) => {
        // Committed after the call gave up on it: a slot nobody holds, unless deleted.
        if (late.ok) this.removeLater(session, path, claim.attemptId);
      });
    } catch (error) {
      if (!isConnectionLoss(error)) throw error;
      const read = await session.readNode(path);
      if (!isOurs(read, session, claim.attemptId)) return 'again';
      return { grant: this.#granted(claim, session, slot, czxidOf(read.stat)) };
    }
    if (outcome.ok) {
      const fencingToken =
        this.#tokens.fromReply(outcome.zxid) ??
        this.#tokens.fromStat(await session.exists(path), session, path, outcome.zxid);
      return { grant: this.#granted(claim, session, slot, fencingToken) };
    }
    if (!unsureBefore) claim.unsureSlots.delete(slot);
    if (outcome.failed !== undefined) refused?.(outcome.failed, outcome.code);
    const failedOp = outcome.failed === undefined ? undefined : ops[outcome.failed];
    // Someone waits: the queue parent is not empty.
    if (outcome.code === ZK_ERROR.NOT_EMPTY && failedOp?.op === 'remove' && failedOp.path === claim.parent) {
      return 'queued';
    }
    if (outcome.code === ZK_ERROR.NO_NODE && failedOp?.op === 'remove' && failedOp.path === claim.parent) {
      // The holders' parent without the queue parent (deleted by hand): make it, then look again. Only while the
      // holders' parent is there, in the same step: both may have gone to another limit since the listing, and a
      // queue parent made beside that limit's pair would be a stray one (the sweep of idle semaphores skips those).
      await session.multi([
        { op: 'check', path: claim.slots },
        { op: 'create', path: claim.parent, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
      ]);
      return 'again';
    }
    if (outcome.code === ZK_ERROR.NODE_EXISTS || outcome.code === ZK_ERROR.NO_NODE) return 'again';
    throw new TransportError(`ZooKeeper refused to take slot ${path} (error ${String(outcome.code)})`);
  }

  /** Whether a permit's slot node still exists, in its session, with its czxid (another holder's would differ). */
  async isHeld(permit: {
    readonly session: Session;
    readonly path: string;
    readonly fencingToken: bigint;
  }): Promise<boolean> {
    const stat = await permit.session.exists(permit.path);
    return stat !== null && ownerOf(stat) === permit.session.id && czxidOf(stat) === permit.fencingToken;
  }

  /** Deletes a slot node after reading that it is still the one this attempt made. */
  async removeIfOurs(session: Session, path: string, attemptId: string): Promise<void> {
    const read = await session.readNode(path);
    if (!isOurs(read, session, attemptId)) return;
    await removeNode(session, path);
  }

  /** {@link removeIfOurs} in the background; handed to the leftovers if the session ends first. */
  removeLater(session: Session, path: string, attemptId: string): void {
    this.#cleanup.retry(
      session,
      () => this.removeIfOurs(session, path, attemptId),
      () => this.#handOver(session, path, attemptId),
    );
  }

  /** Deletes the slots the claim may hold after creates that went unanswered (each only if it names the attempt). */
  async removeUnsure(session: Session, claim: C): Promise<void> {
    for (const unsure of [...claim.unsureSlots]) {
      await this.removeIfOurs(session, `${claim.slots}/${unsure}`, claim.attemptId);
      claim.unsureSlots.delete(unsure);
    }
  }

  /**
   * The claim's session ended: the slots it may hold go with the session, or, with a caller's client that may keep
   * it on the server, with the leftovers (each only if its data names the attempt).
   */
  handOverUnsure(session: Session, claim: C): void {
    for (const unsure of claim.unsureSlots)
      this.#handOver(session, `${claim.slots}/${unsure}`, claim.attemptId);
    claim.unsureSlots.clear();
  }

  /** The claim was granted `slot`: any other slot it may hold is deleted in the background. */
  dropUnsure(session: Session, claim: C, slot: number): void {
    for (const unsure of claim.unsureSlots) {
      if (unsure !== slot) this.removeLater(session, `${claim.slots}/${unsure}`, claim.attemptId);
    }
    claim.unsureSlots.clear();
  }

  /**
   * Slots free right now: `permits` minus the held slot nodes. Throws `PermitsMismatchError` when the semaphore's
   * holders or waiters run with another limit.
   */
  async available(session: Session, name: string, permits: number): Promise<number> {
    const semaphore = semaphorePath(this.#root, name);
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

  /**
   * The limit's parents are missing: create them (and the semaphore's node) with slot 0 taken, deleting the parents
   * of another limit in the same `multi`. Those are deleted only if empty, so a semaphore in use with another limit
   * refuses with `PermitsMismatchError`.
   */
  async #setUp(claim: C, session: Session): Promise<Taken> {
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
    return this.take(claim, session, 0, ops, (failed, code) => {
      const op = ops[failed];
      if (code === ZK_ERROR.NOT_EMPTY && op?.op === 'remove' && op.path !== claim.parent) {
        const other = limitOf(op.path.slice(semaphore.length + 1)) ?? others[0] ?? 0;
        throw new PermitsMismatchError(claim.request.name, permits, other);
      }
      if (code === ZK_ERROR.NO_NODE && op?.op === 'create' && op.path === semaphore) this.#rootReady = false;
    });
  }

  /**
   * The grant of a slot this claim took, unless its session ended meanwhile (the answer came after the session was
   * given up): then the slot stays unsure, for the claim's leave to hand over.
   */
  #granted(claim: C, session: Session, slot: number, fencingToken: bigint): Grant {
    if (session.endError) throw session.endError;
    return this.#grant(claim, session, slot, fencingToken);
  }

  #handOver(session: Session, path: string, attemptId: string): void {
    this.#cleanup.handOverChecked(session, path, (read) => isOurs(read, session, attemptId));
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
    const path = semaphoresRootPath(this.#root);
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
}

/** What a semaphore's queue and slot nodes hold: the limit, the owner, the attempt id, and any metadata. */
export function slotData(claim: SlotClaim): Buffer {
  const { ownerId, metadata } = claim.request;
  const record = { permits: claim.permits, owner: ownerId, attempt: claim.attemptId };
  return encodePermitData(metadata === undefined ? record : { ...record, metadata });
}

function isOurs(read: NodeRead | null, session: Session, attemptId: string): read is NodeRead {
  if (read === null) return false;
  return ownerOf(read.stat) === session.id && decodePermitData(read.data)?.attempt === attemptId;
}
