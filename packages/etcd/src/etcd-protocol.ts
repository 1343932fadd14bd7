import type { AcquireRequest, Lease, RenewRequest, RenewResult } from '@dlock/core';
import { TransportError } from '@dlock/core';
import { type QueueDriver, type Standing, unlessAborted } from '@dlock/core/adapter';
import type { RequestOpLike, TxnResponseLike } from './client-like.js';
import { isLeaseNotFound, transportError } from './errors.js';
import { type DriverParts, EtcdDriver } from './etcd-driver.js';
import type { KeepAliveOutcome, TrackedLease } from './etcd-session.js';
import { assertFullTtl, type GrantRecord } from './grants.js';
import { contenderKey, lockDirectory, prefixRangeEnd } from './keys.js';
import { Slots } from './slots.js';
import { byCreate, createdAt, isEmpty, keysOnly, mayStillLand, rangeKvs } from './txns.js';
import { encodeValue } from './values.js';
import { GONE, leaseOf, newClaim, PAUSE, type QueueClaim, refreshed } from './waits.js';

/** One acquire attempt's place in a lock's queue: a key under the lock's directory, named before any I/O. */
export interface Claim extends QueueClaim {
  readonly request: AcquireRequest;
  readonly directory: Buffer;
  readonly rangeEnd: Buffer;
  /** The key's number among this service's contenders for the lock (see `Slots`). */
  readonly slot: number;
  readonly key: Buffer;
  /** Create revision of `key`; 0 while unknown (not written yet, or the write's answer is lost). */
  revision: bigint;
  /** etcd answered that no key of this attempt is left: a try found the lock held, or a give-up deleted it. */
  unwritten: boolean;
  slotFreed: boolean;
}

/** What a queued claim waits for: the key just ahead of it to be deleted (watched from a revision), or a pause. */
export type Wait =
  | { readonly predecessor: Buffer; readonly fromRevision: bigint }
  | { readonly pauseMs: number };

/** A lock this service holds; `keySlot` is its key's number, free again once the key is gone. */
interface HeldLock extends GrantRecord {
  readonly keySlot: number;
}

/**
 * The lock protocol of etcd's own `concurrency.Mutex`, as core's queue driver: each contender writes a key under the
 * lock's directory, attached to its lease; the key with the lowest create revision holds the lock (its create
 * revision is the fencing token); every other contender watches only the key just before its own, so a release
 * wakes exactly one waiter, in FIFO order. Core's `acquireInQueue` runs the loop; this class is its atomic steps,
 * plus renew and release of the locks it granted.
 */
export class EtcdProtocol extends EtcdDriver<HeldLock> implements QueueDriver<Claim, Wait> {
  readonly #slots = new Slots();
  /** Locks an acquire of this service last found held by another service (see `#heldByOther`). */
  readonly #busy = new RecentNames();

  constructor(parts: DriverParts) {
    super(parts, { freed: (held) => this.#slots.free(held.name, held.keySlot) });
  }

  /** Names the claim's key: the lowest key number of the name free in this service (keys are reused, see keys.ts). */
  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): Claim {
    const directory = lockDirectory(this.prefix, request.name);
    const slot = this.#slots.take(request.name);
    const key = contenderKey(directory, this.serviceId, slot);
    const rangeEnd = prefixRangeEnd(directory);
    return {
      ...newClaim(request, startedAt),
      directory,
      rangeEnd,
      slot,
      key,
      revision: 0n,
      unwritten: false,
      slotFreed: false,
    };
  }

  /**
   * Takes a lease (or joins the session), then one transaction: if the lock's directory is empty, the put alone
   * makes us the holder (the uncontended path is one put). Otherwise it reads our key as it was, rewrites it, and
   * reads the holder and the two newest keys (the second newest is the one to watch). A caller that does not wait
   * (`queue: false`) writes nothing to a held lock, only reads our key and the holder: a key of its, written only to
   * be deleted, would lead the directory if the holder left in between, and an election's observers would report
   * as leader a candidate that was told it lost. A key of ours found already there is stale — left by an attempt
   * whose delete failed or whose answer was lost — and its create revision may be an old grant's fencing token: it
   * is deleted and written afresh, never adopted. Unless it is this write's own:
   * etcd3 sends a write again after a connection reset, even one etcd applied, and the copy that answers then finds
   * the key the first copy made. That key keeps its place in the queue (see `isStale`).
   */
  async enqueue(claim: Claim, { queue }: { readonly queue: boolean }): Promise<Standing<Wait>> {
    const { request } = claim;
    if (
      !queue &&
      !this.session.sessionMode &&
      this.#busy.has(request.name) &&
      (await this.#heldByOther(claim))
    ) {
      claim.unwritten = true;
      return this.waits.behind(claim, { pauseMs: 0 });
    }
    const { lease, refresh } = await this.session.forAcquire(request.ttlMs, claim.startedAt, request.signal);
    claim.lease = lease;
    let sentAt = this.clock.monotonic();
    const before = this.txns.newestRevision();
    let response: TxnResponseLike;
    try {
      response = await this.#write(claim, lease, queue);
      if (isStale(response, lease, before)) {
        await this.txns.deleteKey(claim.key, claim.revision, { signal: request.signal });
        claim.revision = 0n;
        sentAt = this.clock.monotonic();
        response = await this.#write(claim, lease, queue);
        if (isStale(response, lease, before)) return GONE;
      }
    } catch (error) {
      // Not awaited: a refresh whose answer is lost must not hold up taking our key back.
      refresh?.catch(() => undefined);
      if (!isLeaseNotFound(error)) throw error;
      this.session.markLost(lease);
      return GONE;
    }
    const outcome = await refreshed(refresh, request.signal);
    // The write and the refresh beside it decide a free lock: together, one round trip.
    claim.roundTripMs = this.clock.monotonic() - sentAt;
    if (outcome && !(outcome instanceof Error) && !outcome.alive) return GONE;
    const holder = response.succeeded ? undefined : rangeKvs(response, queue ? 3 : 1)[0];
    if (response.succeeded || (holder && BigInt(holder.create_revision) === claim.revision)) {
      this.#busy.forget(request.name);
      assertFullTtl(outcome, lease, claim);
      return this.#first(claim, lease);
    }
    if (holder && !this.#isOurs(claim, holder.key)) this.#busy.saw(request.name);
    if (!queue) {
      // A key of ours found here is an earlier copy of this write (a stale one was taken out above): leave deletes it.
      claim.unwritten = claim.revision === 0n;
      return this.waits.behind(claim, { pauseMs: 0 });
    }
    const newest = rangeKvs(response, 4);
    const mine = newest[0] !== undefined && BigInt(newest[0].create_revision) === claim.revision;
    const predecessor = mine ? newest[1]?.key : undefined;
    if (predecessor === undefined) return this.waits.behind(claim, { pauseMs: 0 });
    const fromRevision = BigInt(response.header.revision) + 1n;
    return this.waits.behind(claim, { predecessor, fromRevision });
  }

  /**
   * Re-reads our key and the key just before it. Our key still existing with our revision, and the lease confirmed
   * recently (a keep-alive goes beside the read when its last confirmation is old), together are the lease check
   * etcd's own mutex lacked (etcd #11456): a claim whose lease ran out while it waited is never reported held.
   * A failed re-read pauses and re-reads, keeping the claim's place, until the wait's deadline.
   */
  async check(claim: Claim): Promise<Standing<Wait>> {
    const { key, directory, rangeEnd, revision, request } = claim;
    const { signal } = request;
    const lease = leaseOf(claim);
    const at = this.clock.monotonic();
    const keepAlive = this.waits.keepAliveUnlessFresh(claim, lease, at);
    const before = {
      ...byCreate(directory, rangeEnd, 'Descend', 1),
      max_create_revision: String(revision - 1n),
    };
    let response: TxnResponseLike;
    let confirmed: KeepAliveOutcome | Error;
    try {
      response = await this.txns.run(
        'acquire',
        { success: [keysOnly(key), { request_range: before }] },
        { signal },
      );
      confirmed = await unlessAborted(keepAlive, signal);
    } catch (error) {
      if (signal.aborted || this.clock.monotonic() >= claim.deadline) throw error;
      return PAUSE;
    }
    // The re-read and the keep-alive beside it are what a grant after a wait rests on: one round trip.
    claim.roundTripMs = this.clock.monotonic() - at;
    const own = rangeKvs(response, 0)[0];
    const alive = confirmed instanceof Error ? undefined : confirmed.alive;
    if (own === undefined || BigInt(own.create_revision) !== revision || alive === false) return GONE;
    const predecessor = rangeKvs(response, 1)[0]?.key;
    if (predecessor) {
      return this.waits.behind(claim, {
        predecessor,
        fromRevision: BigInt(response.header.revision) + 1n,
      });
    }
    if (confirmed instanceof Error) {
      // First in line, but the lease's remaining life is unconfirmed: ask again rather than guess.
      if (this.clock.monotonic() >= claim.deadline) throw confirmed;
      return PAUSE;
    }
    return this.#first(claim, lease);
  }

  /**
   * Sleeps until the predecessor's key is deleted (watched from the revision after our read, so a delete between
   * the read and the watch is not missed), the watch resets, the poll floor or `ms` passes, or our lease is lost.
   * At the end of `ms` with no notice nothing has changed that a re-read could show: the claim stays where it was,
   * and core gives up without one more request.
   */
  wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<Standing<Wait> | undefined> {
    return this.waits.sleep(leaseOf(claim), {
      ms,
      signal,
      pauseMs: 'pauseMs' in wait ? wait.pauseMs : undefined,
      watch:
        'predecessor' in wait
          ? this.waits.deletes({ key: wait.predecessor, startRevision: wait.fromRevision })
          : undefined,
    });
  }

  /**
   * Takes our key out of the queue (giving the lock back if it was granted): revokes a lease of its own, which
   * deletes the key in the same raft entry, or deletes the key from the session, guarded by its create revision.
   * Each try is bounded by `requestTimeoutMs` (see `EtcdDriver.revokeOwn`); core retries in the background. With the
   * revision unknown (the write's answer is lost) the delete is unguarded and the key number is never reused by this
   * service, so it can only hit that write; while the write may still land, the try counts as failed, so that one
   * more delete follows it. A try that etcd answered as having written nothing has nothing to delete.
   */
  async leave(claim: Claim): Promise<void> {
    this.abandon(claim);
    const lease = claim.lease;
    // A key that survived a failed revoke is found stale and removed by the next contender in the slot.
    if (!lease?.session) return this.revokeOwn(lease, () => this.#freeSlot(claim));
    if (lease.isLost || claim.unwritten) {
      this.#freeSlot(claim);
      return;
    }
    const known = claim.revision > 0n;
    const writing = mayStillLand(claim, this.clock.monotonic());
    try {
      await this.txns.deleteKey(claim.key, known ? claim.revision : undefined, {
        timeoutMs: this.txns.requests.timeoutMs,
      });
    } finally {
      if (known) this.#freeSlot(claim);
    }
    if (!known && writing) throw new TransportError('etcd acquire: a write given up on may still land');
  }

  /**
   * Leaves at the deadline in one transaction that deletes our key only if another key is ahead of it. A key that
   * leads the directory (the holder left and its notice has not reached us yet) is kept and confirmed as `check`
   * confirms a wake-up: deleting it would show observers a holder, an election's leader, that is told it lost.
   * Whatever cannot be confirmed is left as `leave` leaves it.
   */
  async giveUp(claim: Claim): Promise<Standing<Wait>> {
    const { key, directory, rangeEnd, revision } = claim;
    if (revision === 0n) {
      await this.leave(claim);
      return GONE;
    }
    const response = await this.txns.run(
      'acquire',
      {
        // Every key of the directory created at or after ours: ours leads (an empty directory fails it).
        compare: [
          {
            key: directory,
            range_end: rangeEnd,
            target: 'Create',
            result: 'Greater',
            create_revision: String(revision - 1n),
          },
        ],
        success: [keysOnly(key)],
        failure: [
          {
            request_txn: {
              compare: [createdAt(key, revision)],
              success: [{ request_delete_range: { key } }],
            },
          },
        ],
      },
      { timeoutMs: this.txns.requests.timeoutMs },
    );
    const own = response.succeeded ? rangeKvs(response, 0)[0] : undefined;
    if (own !== undefined && BigInt(own.create_revision) === revision) {
      const standing = await this.check(claim);
      if (standing.kind === 'first') return standing;
    } else {
      // Deleted by the transaction, or gone before it: only a lease of its own is left to revoke.
      claim.unwritten = true;
    }
    await this.leave(claim);
    return GONE;
  }

  /** One keep-alive of the lock's lease, or a share of a recent one on a session (see `EtcdSession.renewal`). */
  renew(request: RenewRequest): Promise<RenewResult> {
    return this.grants.renew(request);
  }

  /** A lease per lock is revoked (deleting its key); a session's key is deleted if its create revision matches. */
  release(lease: Lease): Promise<boolean> {
    return this.grants.release(lease);
  }

  /**
   * Rewrites the value of a held lock's key, in a transaction that first checks the key is still the one we were
   * granted (its create revision, so also still first in line: keys written later sort after it) and still on our
   * lease. The put names the lease again (a put without one would detach the key from it); it keeps the create
   * revision, which is the fencing token, and does not touch the lease's expiry. A failed check means the key is
   * gone: the grant is dropped, so the next renewal reports it lost.
   */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const token = lease.ownershipToken;
    const held = this.grants.live(lease);
    if (!held) return false;
    const { key, revision } = held;
    const leaseId = held.lease.id;
    const response = await this.txns.run('update metadata', {
      compare: [createdAt(key, revision), { key, target: 'Lease', result: 'Equal', lease: leaseId }],
      success: [{ request_put: { key, value: encodeValue(metadata, lease.ownerId), lease: leaseId } }],
    });
    if (response.succeeded) return true;
    this.grants.drop(token, held);
    return false;
  }

  /** The revision to start a watch of a lock from, if a response showed one within the last second. */
  recentRevision(): bigint | undefined {
    return this.txns.recentRevision();
  }

  /** The enqueue transaction (see `enqueue`); the claim learns its key's create revision, even from a late answer. */
  async #write(claim: Claim, lease: TrackedLease, queue: boolean): Promise<TxnResponseLike> {
    const { key, directory, rangeEnd, request } = claim;
    const put: RequestOpLike = {
      request_put: { key, value: encodeValue(request.metadata, request.ownerId), lease: lease.id },
    };
    const txn = {
      compare: [isEmpty(directory, rangeEnd)],
      success: [put],
      failure: queue
        ? [
            keysOnly(key),
            put,
            keysOnly(key),
            { request_range: byCreate(directory, rangeEnd, 'Ascend', 1) },
            { request_range: byCreate(directory, rangeEnd, 'Descend', 2) },
          ]
        : [keysOnly(key), { request_range: byCreate(directory, rangeEnd, 'Ascend', 1) }],
    };
    // Answered after we gave up: the key exists; core's clean-up (leave) deletes it, now by its revision.
    const response = await this.txns.write(claim, 'acquire', txn, (late) => {
      const own = ownRevision(late, queue);
      if (own !== undefined) claim.revision = BigInt(own);
    });
    const own = ownRevision(response, queue);
    if (own !== undefined) claim.revision = BigInt(own);
    else if (queue) throw transportError('acquire', new Error('own key missing after write'));
    return response;
  }

  /**
   * A try on a lock this service last found held by someone else reads the holder first (one read, no lease): held
   * by another service, the answer is "busy" without granting a lease only to revoke it (two round trips and lease
   * churn on the cluster for nothing). Nothing is written, as a try must write nothing into a held lock. Found free,
   * or led by a key of this service (which the write handles: a stale key of ours is replaced), the try goes on.
   */
  async #heldByOther(claim: Claim): Promise<boolean> {
    const { directory, rangeEnd, request } = claim;
    const response = await this.txns.run(
      'acquire',
      { success: [{ request_range: { ...byCreate(directory, rangeEnd, 'Ascend', 1), keys_only: true } }] },
      { signal: request.signal },
    );
    const holder = rangeKvs(response, 0)[0];
    if (holder && !this.#isOurs(claim, holder.key)) return true;
    this.#busy.forget(request.name);
    return false;
  }

  /** Whether a key of the claim's directory is one of this service's contender keys. */
  #isOurs(claim: Claim, key: Buffer): boolean {
    const own = contenderKey(claim.directory, this.serviceId, 0);
    // The key without its slot number: the directory, our service id and `_`.
    const stem = own.subarray(0, own.length - 1);
    return key.length > stem.length && key.subarray(0, stem.length).equals(stem);
  }

  #first(claim: Claim, lease: TrackedLease): Standing<Wait> {
    this.waits.stop(claim);
    if (lease.isLost) return GONE;
    const { request, slot, key, revision } = claim;
    const held = { name: request.name, keySlot: slot, key, revision, lease };
    return { kind: 'first', grant: this.grants.add(held, claim) };
  }

  #freeSlot(claim: Claim): void {
    if (claim.slotFreed) return;
    claim.slotFreed = true;
    this.#slots.free(claim.request.name, claim.slot);
  }
}

/**
 * Whether the enqueue write found a key of ours that an earlier attempt left. A key it found on its own lease and
 * created after `before` (the newest revision any answer had shown when it was sent) is the one an earlier copy of
 * the same write made: any key of an earlier attempt on the same lease (a session) has a create revision some answer
 * showed first, since its slot is reused only once that revision is known.
 */
function isStale(response: TxnResponseLike, lease: TrackedLease, before: bigint): boolean {
  if (response.succeeded) return false;
  const found = rangeKvs(response, 0)[0];
  if (found === undefined) return false;
  return found.lease !== lease.id || BigInt(found.create_revision) <= before;
}

/**
 * Create revision of our key after the write: the transaction's own revision if it succeeded, else its re-read (when
 * not queueing, the read of our key, which exists only if an earlier attempt or copy of this write left it).
 */
const ownRevision = (response: TxnResponseLike, queue: boolean): string | undefined =>
  response.succeeded ? response.header.revision : rangeKvs(response, queue ? 2 : 0)[0]?.create_revision;

/** Lock names remembered, at most (the oldest is forgotten first): a hint only, never what an answer rests on. */
const BUSY_MAX = 1_000;

/** A bounded set of names, oldest first. */
class RecentNames {
  readonly #names = new Set<string>();

  has(name: string): boolean {
    return this.#names.has(name);
  }

  saw(name: string): void {
    this.#names.delete(name);
    this.#names.add(name);
    if (this.#names.size > BUSY_MAX) {
      const oldest = this.#names.values().next().value;
      if (oldest !== undefined) this.#names.delete(oldest);
    }
  }

  forget(name: string): void {
    this.#names.delete(name);
  }
}
