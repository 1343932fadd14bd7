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
import {
  childrenOf,
  createPersistent,
  deleteVersion,
  EMPTY,
  lookAtParent,
  madeParent,
  type ParentLook,
  readPlain,
  removeNode,
} from './node-ops.js';
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

/**
 * A take's outcome: the grant, someone waits (or every slot is held), a lost race, or a queue parent with data or
 * another ACL, which a take must not delete (only a queue node, first in line, may then take a slot).
 */
export type Taken = { readonly grant: Grant } | 'queued' | 'again' | 'foreign';

/** Internal to a take: the queue parent was not at the version its delete named (see `tryTake`). */
type Refused = Taken | 'version';

const noop = (): void => {};

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
  /** Per client: whether its transactions can write data, which leaves a queue parent at MADE_VERSION. */
  readonly #stamps = new WeakMap<object, boolean>();

  constructor(root: string, cleanup: NodeCleanup, grant: GrantSlot<C>) {
    this.#root = root;
    this.#cleanup = cleanup;
    this.#grant = grant;
  }

  /**
   * Reads the holders' parent and, with a slot free, takes it if nobody waits: deleting the queue parent fails with
   * NotEmpty if anyone waits, so the check and the take are one step. `again` after a lost race (the slot was
   * taken meanwhile, the parents went or were made by someone else); `queued` when someone waits or every slot is
   * held; `foreign` for a queue parent with data or another ACL.
   *
   * The queue parent's ACL and stat are read (`getACL`) in the same round trip as the holders' listing, and it is
   * deleted only when read with no data and the open ACL, at the version read: a multi can check a data version
   * only, and `setAcl` leaves that alone. It is made again empty, with the open ACL, at MADE_VERSION (as a lock's
   * try makes its parent), so data written between the read and the take refuses the delete with BadVersion.
   */
  async tryTake(claim: C, session: Session): Promise<Taken> {
    const looked = lookAtParent(session, claim.parent);
    looked.catch(noop);
    const held = await childrenOf(session, claim.slots);
    const look = await looked;
    if (held === undefined) {
      const setUp = await this.#setUp(claim, session, look);
      return setUp === 'version' ? 'again' : setUp;
    }
    const slot = freeSlot(held, claim.permits);
    if (slot === undefined) return 'queued';
    // Without it, no queue parent is at the version read when it is deleted: all are kept, as a foreign one.
    if (look === 'foreign' || !this.#canStamp(session)) return 'foreign';
    if (look === 'missing') {
      await this.#remakeQueueParent(claim, session);
      return 'again';
    }
    const taken = await this.#take(claim, session, slot, [
      { op: 'remove', path: claim.parent, version: deleteVersion(look.version) },
      ...madeParent(claim.parent),
    ]);
    // Written again between the read and the take: the next round reads it anew.
    return taken === 'version' ? 'again' : taken;
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
    const taken = await this.#take(claim, session, slot, before, refused);
    // Only a delete of the queue parent names a version, and only `tryTake`'s: never here.
    if (taken === 'version') throw new TransportError(`ZooKeeper refused to take slot ${slot} (bad version)`);
    return taken;
  }

  async #take(
    claim: C,
    session: Session,
    slot: number,
    before: readonly MultiOp[],
    refused?: (failed: number, code: number | undefined) => void,
  ): Promise<Refused> {
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
    if (
      outcome.code === ZK_ERROR.BAD_VERSION &&
      failedOp?.op === 'remove' &&
      failedOp.path === claim.parent
    ) {
      return 'version';
    }
    if (outcome.code === ZK_ERROR.NO_NODE && failedOp?.op === 'remove' && failedOp.path === claim.parent) {
      await this.#remakeQueueParent(claim, session);
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
   * holders or waiters run with another limit, or its idle parents of another limit are kept (data, another ACL).
   */
  async available(session: Session, name: string, permits: number): Promise<number> {
    const semaphore = semaphorePath(this.#root, name);
    const held = await childrenOf(session, permitSlotsPath(semaphore, permits));
    if (held !== undefined) return Math.max(0, permits - heldSlots(held, permits));
    for (const child of (await childrenOf(session, semaphore)) ?? []) {
      const other = limitOf(child);
      if (other === undefined || other === permits) continue;
      const path = `${semaphore}/${child}`;
      const stat = await session.exists(path);
      if (stat && (stat.numChildren ?? 1) > 0) throw new PermitsMismatchError(name, permits, other);
      // Idle, but with data or another ACL: kept, so the limit cannot be switched (see `#setUp`).
      if (stat && (await readPlain(session, path)) === 'foreign') {
        throw new PermitsMismatchError(name, permits, other);
      }
    }
    return permits;
  }

  /**
   * The limit's parents are missing: create them (and the semaphore's node) with slot 0 taken, deleting the parents
   * of another limit in the same `multi`. Those are deleted only if empty, so a semaphore in use with another limit
   * refuses with `PermitsMismatchError`; and only if read with no data and the open ACL, at the version read, as a
   * take deletes its queue parent: one someone gave data or another ACL keeps the old limit, which is then the
   * semaphore's limit for good (`PermitsMismatchError` too).
   */
  async #setUp(claim: C, session: Session, look: ParentLook): Promise<Refused> {
    const { semaphore, permits } = claim;
    const children = await childrenOf(session, semaphore);
    const ops: MultiOp[] = [];
    const others: { path: string; limit: number }[] = [];
    let queueParent = false;
    if (children === undefined) {
      if (!this.#rootReady) await this.#ensureSemaphoresRoot(session);
      ops.push({ op: 'create', path: semaphore, data: EMPTY, mode: CREATE_MODE.PERSISTENT });
    } else {
      for (const child of children) {
        const limit = limitOf(child);
        if (limit === undefined) continue;
        const path = `${semaphore}/${child}`;
        if (path === claim.slots) return 'again'; // made by someone else since the read
        if (path === claim.parent) queueParent = true;
        else others.push({ path, limit });
      }
    }
    // Pipelined: one round trip however many parents another limit left.
    const versions = await Promise.all(others.map(({ path }) => readPlain(session, path)));
    for (const [i, { path, limit }] of others.entries()) {
      const version = versions[i];
      if (version === undefined || version === 'missing') return 'again'; // switched or deleted by someone else since the listing
      if (version === 'foreign') throw new PermitsMismatchError(claim.request.name, permits, limit);
      ops.push({ op: 'remove', path, version: deleteVersion(version) });
    }
    if (queueParent) {
      // The queue parent without its holders' parent (deleted by hand) is re-made, empty or NotEmpty as any take;
      // one with data or another ACL is kept, and gets its holders' parent alone: its slots go through its queue.
      if (look === 'missing') return 'again';
      if (look === 'foreign' || !this.#canStamp(session)) {
        if (ops.length === 0) await createPersistent(session, claim.slots);
        return 'again';
      }
      ops.push({ op: 'remove', path: claim.parent, version: deleteVersion(look.version) });
    }
    ops.push(...this.#madeParent(session, claim.parent), {
      op: 'create',
      path: claim.slots,
      data: EMPTY,
      mode: CREATE_MODE.PERSISTENT,
    });
    return this.#take(claim, session, 0, ops, (failed, code) => {
      const op = ops[failed];
      if (code === ZK_ERROR.NOT_EMPTY && op?.op === 'remove' && op.path !== claim.parent) {
        const other = limitOf(op.path.slice(semaphore.length + 1)) ?? others[0]?.limit ?? 0;
        throw new PermitsMismatchError(claim.request.name, permits, other);
      }
      if (code === ZK_ERROR.NO_NODE && op?.op === 'create' && op.path === semaphore) this.#rootReady = false;
    });
  }

  /**
   * The holders' parent without the queue parent (deleted by hand): make it, then look again. Only while the
   * holders' parent is there, in the same step: both may have gone to another limit since the listing, and a queue
   * parent made beside that limit's pair would be a stray one (the sweep of idle semaphores skips those).
   */
  async #remakeQueueParent(claim: C, session: Session): Promise<void> {
    await session.multi([{ op: 'check', path: claim.slots }, ...this.#madeParent(session, claim.parent)]);
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

  /** A queue parent made at MADE_VERSION (see `tryTake`), or at 0 by a client whose transactions cannot write data. */
  #madeParent(session: Session, path: string): MultiOp[] {
    const ops = madeParent(path);
    return this.#canStamp(session) ? ops : ops.slice(0, 1);
  }

  /** Once per client, as `#assertMulti`. */
  #canStamp(session: Session): boolean {
    let can = this.#stamps.get(session.client);
    if (can === undefined) {
      can = typeof session.client.transaction().setData === 'function';
      this.#stamps.set(session.client, can);
    }
    return can;
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
