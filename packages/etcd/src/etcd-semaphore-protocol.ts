import { randomUUID } from 'node:crypto';
import type { AcquireRequest, Grant, Lease, PermitRequest, RenewRequest, RenewResult } from '@dlock/core';
import { InvalidArgumentError, PermitsMismatchError, TransportError } from '@dlock/core';
import {
  type BackgroundRetries,
  type QueueDriver,
  type Standing,
  unlessAborted,
  WakeSignal,
} from '@dlock/core/adapter';
import type {
  CompareLike,
  KeyValueLike,
  KvClientLike,
  RequestOpLike,
  TxnResponseLike,
} from './client-like.js';
import { isLeaseNotFound, transportError } from './errors.js';
import {
  asError,
  byCreate,
  leaseOf,
  POLL_FLOOR_MS,
  RETRY_PAUSE_MS,
  rangeKvs,
  SESSION_CLEANUP_MS,
  validity,
} from './etcd-protocol.js';
import type { EtcdReleaseWatch } from './etcd-release-watch.js';
import type { EtcdSession, KeepAliveOutcome, TrackedLease } from './etcd-session.js';
import {
  escapeName,
  limitOf,
  newOwnershipToken,
  newServiceId,
  type SemaphoreLayout,
  semaphoreLayout,
  slotKey,
  slotOf,
} from './keys.js';
import type { EtcdRequests } from './requests.js';
import { SlotHints } from './slot-hints.js';
import { Slots } from './slots.js';
import { encodePermitRecord } from './values.js';

/** One attempt at a permit: its queue key (named before any I/O) and the slot it last tried or holds. */
export interface PermitClaim {
  readonly request: PermitRequest;
  readonly startedAt: number;
  readonly deadline: number;
  readonly layout: SemaphoreLayout;
  /** The queue key's number among this service's waiters of the semaphore (keys are reused, as for locks). */
  readonly number: number;
  readonly queueKey: Buffer;
  /** Every key this attempt writes has this value; its random attempt id tells this attempt's slot key apart. */
  readonly value: Buffer;
  /** The lease the queue key is written with: the claim's own, or on a session the waiters' session. */
  lease: TrackedLease | undefined;
  /** The lease the last slot key put named: the claim's own, or the grants' session. */
  holder: TrackedLease | undefined;
  /** A put of the queue key was sent and the key has not been taken out by us since. */
  queued: boolean;
  /** Create revision of the queue key; 0 while unknown. */
  queueRevision: bigint;
  /** The slot a put was last sent for, landed or not; undefined once etcd answered that it did not land. */
  slot: number | undefined;
  /** Create revision of the slot key once etcd confirmed the put: the fencing token. */
  slotRevision: bigint;
  /** A write is in flight, even one given up on: it may still land. */
  writing: boolean;
  /** Queued, keeping its lease alive. */
  waiting: boolean;
  numberFreed: boolean;
  /** First in line: the slot whose delete woke us, tried first by the re-check. */
  freed: number | undefined;
  /** Set once granted: the grant's ownership token. */
  token: string | undefined;
  roundTripMs: number;
}

/**
 * What a queued claim waits for: the queue key just ahead to be deleted; for the first in line, a slot key to be
 * deleted (watched from a revision); or a pause.
 */
export type PermitWait =
  | { readonly predecessor: Buffer; readonly fromRevision: bigint }
  | { readonly slotsFrom: bigint }
  | { readonly pauseMs: number };

/** A permit this service holds: what `renew` and `release` check a core `Lease` against. */
interface HeldPermit {
  readonly name: string;
  readonly hintKey: string;
  readonly slot: number;
  readonly key: Buffer;
  readonly revision: bigint;
  readonly lease: TrackedLease;
}

/** What the enqueue transaction found. */
type Entered =
  | { readonly kind: 'granted'; readonly sentAt: number }
  /** Queued (`predecessor` unset: first in line); `free` is a slot nobody held at the write. */
  | {
      readonly kind: 'queued';
      readonly sentAt: number;
      readonly revision: bigint;
      readonly predecessor: Buffer | undefined;
      readonly free: number | undefined;
    }
  /** Not queued (`queue: false`): someone waits, or no slot is free. */
  | { readonly kind: 'refused'; readonly sentAt: number; readonly free: number | undefined }
  /** Our queue key was already there, left by an earlier attempt: it keeps that attempt's place, never ours. */
  | { readonly kind: 'stale'; readonly sentAt: number };

const GONE = { kind: 'gone' } as const;
const PAUSE: Standing<PermitWait> = { kind: 'behind', wait: { pauseMs: RETRY_PAUSE_MS } };
const NOT_QUEUED: Standing<PermitWait> = { kind: 'behind', wait: { pauseMs: 0 } };
/** Tries at a slot seen free before giving the turn back to the loop: each failure means another took a slot. */
const SLOT_TRIES = 3;

const isEmpty = (key: Buffer, rangeEnd: Buffer): CompareLike => ({
  key,
  range_end: rangeEnd,
  target: 'Create',
  result: 'Equal',
  create_revision: '0',
});
const createdAt = (key: Buffer, revision: bigint): CompareLike => ({
  key,
  target: 'Create',
  result: 'Equal',
  create_revision: String(revision),
});
const keysOnly = (key: Buffer, rangeEnd?: Buffer) => ({
  request_range: { key, ...(rangeEnd ? { range_end: rangeEnd } : {}), keys_only: true },
});

/**
 * A semaphore on etcd, as core's queue driver (core's `acquireInQueue` runs the loop; this class is its atomic
 * steps, plus renew and release of the permits it granted). Keys (see `semaphoreLayout`): a holder is the key of its
 * slot, created under its lease only if absent (`create_revision == 0`), so a slot has one holder at a time and its
 * fencing token is the key's create revision: etcd's global revision, raft-logged, strictly increasing from one
 * holder of a slot to the next. A waiter is a queue key under its lease; waiters are served in create-revision
 * order. The first waiter alone watches the slot keys for a delete; every other waiter watches only the queue key
 * just before its own. A waiter takes a slot and deletes its queue key in one transaction, so a holder has no queue
 * key and the next waiter's watch fires exactly then: one wake-up per release, in FIFO order.
 *
 * Every write compares the semaphore's keys outside this limit's directory as absent, so holders and waiters of
 * one semaphore always share one limit (`PermitsMismatchError` otherwise), and every slot taken without queueing
 * compares the queue as empty, so a caller that does not wait never overtakes one that does.
 */
export class EtcdSemaphoreProtocol implements QueueDriver<PermitClaim, PermitWait> {
  readonly #kv: KvClientLike;
  readonly #requests: EtcdRequests;
  readonly #session: EtcdSession;
  readonly #watch: EtcdReleaseWatch;
  readonly #cleanups: BackgroundRetries;
  readonly #prefix: string;
  readonly #undoTryMs: number;
  readonly #held = new Map<string, HeldPermit>();
  /** Queue key numbers per semaphore name. */
  readonly #numbers = new Slots();
  /** Slots this service holds or is trying, per semaphore and limit: the first slot to try is one of the others. */
  readonly #hints = new SlotHints();
  readonly #serviceId = newServiceId();

  constructor(parts: {
    readonly kv: KvClientLike;
    readonly requests: EtcdRequests;
    readonly session: EtcdSession;
    readonly watch: EtcdReleaseWatch;
    readonly cleanups: BackgroundRetries;
    readonly prefix: string;
  }) {
    this.#kv = parts.kv;
    this.#requests = parts.requests;
    this.#session = parts.session;
    this.#watch = parts.watch;
    this.#cleanups = parts.cleanups;
    this.#prefix = parts.prefix;
    // As for locks: an undo try is bounded like any request (see EtcdProtocol).
    this.#undoTryMs = parts.requests.timeoutMs;
  }

  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): PermitClaim {
    const permitRequest = asPermitRequest(request);
    const layout = semaphoreLayout(this.#prefix, request.name, permitRequest.permits);
    const number = this.#numbers.take(request.name);
    return {
      request: permitRequest,
      startedAt,
      deadline: startedAt + request.waitMs,
      layout,
      number,
      queueKey: Buffer.concat([layout.queue, Buffer.from(`${this.#serviceId}_${number}`, 'latin1')]),
      value: encodePermitRecord({
        permits: permitRequest.permits,
        owner: request.ownerId,
        attempt: randomUUID(),
        ...(request.metadata === undefined ? {} : { metadata: request.metadata }),
      }),
      lease: undefined,
      holder: undefined,
      queued: false,
      queueRevision: 0n,
      slot: undefined,
      slotRevision: 0n,
      writing: false,
      waiting: false,
      numberFreed: false,
      freed: undefined,
      token: undefined,
      roundTripMs: 0,
    };
  }

  /**
   * Takes a lease (or joins the session), then one transaction: a free slot if nobody queues, else (when waiting)
   * a queue key. A first waiter that saw a free slot takes it at once with one more transaction. On a session the
   * queue key rides on the waiters' session, opened (one more round trip) when the first waiter needs it.
   */
  async enqueue(claim: PermitClaim, { queue }: { readonly queue: boolean }): Promise<Standing<PermitWait>> {
    const { request } = claim;
    const { signal } = request;
    const { lease: holder, refresh } = await this.#session.forAcquire(request.ttlMs, claim.startedAt, signal);
    claim.holder = holder;
    const waitersTtlS = this.#session.sessionTtlS(request.ttlMs);
    let waiters = !queue ? undefined : holder.session ? this.#session.liveWaiters(waitersTtlS) : holder;
    claim.lease = waiters ?? holder;
    let entered: Exclude<Entered, { readonly kind: 'stale' }> | undefined;
    try {
      entered = await this.#enterOnce(claim, holder, waiters);
      if (queue && !waiters && entered?.kind === 'refused') {
        waiters = await unlessAborted(this.#session.session(waitersTtlS, 'waiters'), signal);
        claim.lease = waiters;
        entered = await this.#enterOnce(claim, holder, waiters);
      }
    } catch (error) {
      // Not awaited: a refresh whose answer is lost must not hold up taking our keys back.
      refresh?.catch(() => undefined);
      if (!isLeaseNotFound(error)) throw error;
      await this.#findLost([holder, waiters]);
      return GONE;
    }
    if (!entered) return GONE;
    const refreshed = refresh ? await unlessAborted(refresh.catch(asError), signal) : undefined;
    claim.roundTripMs = this.#requests.clock.monotonic() - entered.sentAt;
    if (refreshed && !(refreshed instanceof Error) && !refreshed.alive) return GONE;
    if (entered.kind === 'refused') return NOT_QUEUED;
    let standing: Standing<PermitWait>;
    if (entered.kind === 'granted') standing = this.#grant(claim, holder);
    else if (entered.predecessor !== undefined) {
      return this.#behind(claim, { predecessor: entered.predecessor, fromRevision: entered.revision + 1n });
    } else if (entered.free === undefined) return this.#behind(claim, { slotsFrom: entered.revision + 1n });
    else standing = await this.#promote(claim, entered.free, holder);
    if (
      standing.kind === 'first' &&
      (refreshed instanceof Error || holder.expiresAt - claim.startedAt < request.ttlMs)
    ) {
      throw transportError('session keep-alive', refreshed ?? new Error('session lease too close to expiry'));
    }
    return standing;
  }

  /**
   * Re-reads where the claim stands and takes a slot if it is first and one is free. Our queue key still existing
   * with our revision, and the grant's lease confirmed recently (a keep-alive goes first when its last confirmation
   * is old), together are the lease check etcd's own mutex lacked (etcd #11456). A failed read pauses and reads again,
   * keeping the claim's place, until the wait's deadline; a failed take ends the attempt (core takes back what it
   * may have written).
   */
  async check(claim: PermitClaim): Promise<Standing<PermitWait>> {
    const { request } = claim;
    const { signal } = request;
    const clock = this.#requests.clock;
    const lease = leaseOf(claim);
    const at = clock.monotonic();
    // On a session the queue key's lease is the waiters' session, which no grant rests on: the take compares the
    // queue key (alive, so its lease is) and `#holderFor` refreshes the grants' session the slot key goes on.
    const fresh =
      lease.session ||
      (lease.expiresAt - at >= lease.ttlMs / 2 && lease.expiresAt - claim.startedAt >= request.ttlMs);
    if (!fresh) {
      let confirmed: KeepAliveOutcome;
      try {
        confirmed = await unlessAborted(this.#session.keepAlive(lease, at), signal);
      } catch (error) {
        if (signal.aborted || clock.monotonic() >= claim.deadline) throw error;
        return PAUSE;
      }
      if (!confirmed.alive) return GONE;
    }
    const freed = claim.freed;
    claim.freed = undefined;
    if (freed !== undefined) return this.#promote(claim, freed);
    return this.#position(claim, at);
  }

  /**
   * Sleeps until the key we wait on is deleted (the predecessor's queue key, or for the first waiter any slot key;
   * watched from the revision after our read, so a delete in between is not missed), the watch resets, the poll
   * floor or `ms` passes, or our lease is lost. A slot key's delete names the slot, which the re-check tries first.
   */
  async wait(
    claim: PermitClaim,
    wait: PermitWait,
    ms: number,
    signal: AbortSignal,
  ): Promise<Standing<PermitWait> | undefined> {
    const lease = leaseOf(claim);
    const lost = lease.lost.signal;
    if (lost.aborted) return GONE;
    const wake = new WakeSignal();
    const notify = (): void => wake.notify();
    lost.addEventListener('abort', notify, { once: true });
    let unwatch = (): void => {};
    if ('predecessor' in wait) {
      unwatch = this.#watch.watch(
        { key: wait.predecessor, startRevision: wait.fromRevision },
        { onDeletes: notify, onReset: notify },
      );
    } else if ('slotsFrom' in wait) {
      const { slots, slotsEnd } = claim.layout;
      unwatch = this.#watch.watch(
        { key: slots, rangeEnd: slotsEnd, startRevision: wait.slotsFrom },
        {
          onDeletes: (events) => {
            claim.freed = slotOf(claim.layout, events[0]?.kv.key ?? Buffer.alloc(0));
            notify();
          },
          onReset: notify,
        },
      );
    }
    const poll = 'pauseMs' in wait ? wait.pauseMs : Math.max(POLL_FLOOR_MS, 2 * lease.ttlMs);
    try {
      await wake.wait(this.#requests.clock, Math.min(ms, poll), signal);
    } finally {
      unwatch();
      lost.removeEventListener('abort', notify);
    }
    return lost.aborted ? GONE : undefined;
  }

  /**
   * Takes the claim's keys out (giving the permit back if it was granted): revokes a lease of its own, which
   * deletes them in the same raft entry; on a session, one transaction deletes the queue key (guarded by its create
   * revision when known; its name is this service's alone) and the slot key last tried (guarded by its create
   * revision, or when that is unknown by this attempt's value, so another holder's key is never hit). While a write
   * may still land the try counts as failed, so that core's background retry deletes once more after it.
   */
  async leave(claim: PermitClaim): Promise<void> {
    this.#stopWaiting(claim);
    if (claim.token !== undefined) this.#forget(claim.token);
    const { holder, lease: waiters } = claim;
    if (!holder?.session) {
      try {
        if (holder) await this.#session.revoke(holder, this.#undoTryMs);
      } finally {
        this.#freeNumber(claim);
      }
      return;
    }
    const writing = claim.writing;
    const known = claim.queueRevision > 0n;
    // A key on a lost lease went with it.
    const queued = claim.queued && waiters !== undefined && !waiters.isLost;
    const deletes: RequestOpLike[] = [];
    if (queued) {
      deletes.push(
        guardedDelete(claim.queueKey, known ? createdAt(claim.queueKey, claim.queueRevision) : undefined),
      );
    }
    const slot = claim.slot;
    if (slot !== undefined && !holder.isLost) {
      const key = slotKey(claim.layout, slot);
      const guard: CompareLike =
        claim.slotRevision > 0n
          ? createdAt(key, claim.slotRevision)
          : { key, target: 'Value', result: 'Equal', value: claim.value };
      deletes.push(guardedDelete(key, guard));
    }
    if (deletes.length > 0) {
      await this.#requests.run('release', (options) => this.#kv.txn({ success: deletes }, options), {
        timeoutMs: this.#undoTryMs,
      });
    }
    if (known || !queued) this.#freeNumber(claim);
    if (writing) throw new TransportError('etcd acquire: a write given up on may still land');
  }

  /** One keep-alive of the permit's lease, or a share of a recent one on a session. */
  async renew(request: RenewRequest): Promise<RenewResult> {
    const token = request.lease.ownershipToken;
    const held = this.#lookup(request.lease);
    if (!held) return { renewed: false };
    if (held.lease.isLost) {
      this.#forget(token);
      return { renewed: false };
    }
    const ttlMs = await this.#session.renewal(held.lease);
    if (ttlMs === undefined) {
      this.#forget(token);
      return { renewed: false };
    }
    if (this.#held.get(token) !== held) return { renewed: false };
    return { renewed: true, ttlMs };
  }

  /**
   * A lease of its own is revoked (deleting the slot key); a session's slot key is deleted if its create revision
   * is still the permit's token. Either wakes the first waiter, whose watch sees the delete.
   */
  async release(lease: Lease): Promise<boolean> {
    const held = this.#lookup(lease);
    if (!held) return false;
    this.#forget(lease.ownershipToken);
    if (!held.lease.session) return this.#session.revoke(held.lease);
    const remove = (): Promise<TxnResponseLike> =>
      this.#requests.run('release', (options) =>
        this.#kv.txn(
          {
            compare: [createdAt(held.key, held.revision)],
            success: [{ request_delete_range: { key: held.key } }],
          },
          options,
        ),
      );
    try {
      const response = await remove();
      return response.succeeded && response.responses[0]?.response_delete_range?.deleted !== '0';
    } catch (error) {
      // The session lives on with the other grants: without a retry this slot would stay taken with it.
      this.#cleanups.run(
        () => (held.lease.isLost ? Promise.resolve() : remove()),
        this.#requests.clock.monotonic() + SESSION_CLEANUP_MS,
      );
      throw error;
    }
  }

  /**
   * How many slots no key holds, in one read that also looks for keys written with another limit. A slot key can
   * outlive its expired lease by up to etcd's lessor interval (500 ms), and counts as held until then.
   */
  async available(name: string, permits: number): Promise<number> {
    const layout = semaphoreLayout(this.#prefix, name, permits);
    const response = await this.#requests.run('available permits', (options) =>
      this.#kv.txn(
        {
          success: [
            ...this.#otherLimits(layout),
            { request_range: { key: layout.slots, range_end: layout.slotsEnd, count_only: true } },
          ],
        },
        options,
      ),
    );
    if (otherLimitKey(response)) throw this.#mismatch(layout, response);
    const held = Number(response.responses[2]?.response_range?.count ?? 0);
    return Math.max(0, permits - held);
  }

  /** The permits of a lost session: forgotten (their keys went with the lease). */
  forgetLost(tokens: readonly string[]): void {
    for (const token of tokens) this.#forget(token);
  }

  /** Forgets every held permit, returning the leases of their own that close() then revokes. */
  forgetAll(): TrackedLease[] {
    const own = [...this.#held.values()].map((held) => held.lease).filter((lease) => !lease.session);
    for (const token of [...this.#held.keys()]) this.#forget(token);
    return own;
  }

  /** `#enter`, and once more after deleting a stale queue key of ours; undefined if it is still there. */
  async #enterOnce(
    claim: PermitClaim,
    holder: TrackedLease,
    waiters: TrackedLease | undefined,
  ): Promise<Exclude<Entered, { readonly kind: 'stale' }> | undefined> {
    const entered = await this.#enter(claim, holder, waiters);
    if (entered.kind !== 'stale') return entered;
    await this.#deleteQueueKey(claim, { signal: claim.request.signal });
    const again = await this.#enter(claim, holder, waiters);
    return again.kind === 'stale' ? undefined : again;
  }

  /**
   * etcd refused a put for a lease it no longer knows, without saying which: a keep-alive of each asks (and marks
   * the lost one lost), so that a lost waiters' session never makes the grants' session look lost, or the reverse.
   */
  async #findLost(leases: readonly (TrackedLease | undefined)[]): Promise<void> {
    const distinct = new Set(leases.filter((lease): lease is TrackedLease => lease !== undefined));
    const now = this.#requests.clock.monotonic();
    await Promise.allSettled([...distinct].map((lease) => this.#session.keepAlive(lease, now)));
  }

  /**
   * The lease a first waiter's slot key is written with: its own lease, or the grants' session, refreshed first
   * when its known life is shorter than the TTL (a grant's validity counts from the lease's last confirmation).
   * Undefined when etcd says the session is gone.
   */
  async #holderFor(claim: PermitClaim): Promise<TrackedLease | undefined> {
    const { holder } = claim;
    if (holder && !holder.session) return holder;
    const { request } = claim;
    const clock = this.#requests.clock;
    const { lease, refresh } = await this.#session.forAcquire(
      request.ttlMs,
      clock.monotonic(),
      request.signal,
    );
    if (refresh && !(await unlessAborted(refresh, request.signal)).alive) return undefined;
    return lease;
  }

  /**
   * The enqueue transaction. Outer comparison: no key of the semaphore under another limit (else the two ranges are
   * read, and the limit found is refused). Inner comparison: nobody queued and the slot we guess free is free → the
   * slot key is created (uncontended: one write). Otherwise, when waiting: our queue key is read as it was, written,
   * read again (its create revision is our place), and the two newest queue keys (the one before ours is the one
   * to watch) and the slot keys are read; when not waiting: only the first queue key and the slot keys are read.
   */
  async #enter(
    claim: PermitClaim,
    holder: TrackedLease,
    waiters: TrackedLease | undefined,
  ): Promise<Entered> {
    const { layout, queueKey, value, request } = claim;
    const queue = waiters !== undefined;
    const hintKey = hintKeyOf(layout);
    let guess = this.#hints.guess(hintKey, layout.permits, this.#requests.clock.monotonic());
    for (let tries = 1; ; tries++) {
      const slot = guess;
      const key = slotKey(layout, slot);
      const failure: RequestOpLike[] = queue
        ? [
            keysOnly(queueKey),
            { request_put: { key: queueKey, value, lease: waiters.id } },
            keysOnly(queueKey),
            { request_range: byCreate(layout.queue, layout.queueEnd, 'Descend', 2) },
            keysOnly(layout.slots, layout.slotsEnd),
          ]
        : [
            { request_range: byCreate(layout.queue, layout.queueEnd, 'Ascend', 1) },
            keysOnly(layout.slots, layout.slotsEnd),
          ];
      const sentAt = this.#requests.clock.monotonic();
      claim.slot = slot;
      if (queue) claim.queued = true;
      this.#hints.add(hintKey, slot);
      let response: TxnResponseLike;
      try {
        response = await this.#write(
          claim,
          'acquire',
          {
            compare: this.#sameLimit(layout),
            success: [
              {
                request_txn: {
                  compare: [isEmpty(layout.queue, layout.queueEnd), createdAt(key, 0n)],
                  success: [{ request_put: { key, value, lease: holder.id } }],
                  failure,
                },
              },
            ],
            failure: this.#otherLimits(layout),
          },
          (late) => this.#learnEntered(claim, late, queue),
        );
      } finally {
        this.#hints.remove(hintKey, slot);
      }
      this.#learnEntered(claim, response, queue);
      if (!response.succeeded) throw this.#mismatch(layout, response);
      const inner = innerOf(response);
      if (inner.succeeded) return { kind: 'granted', sentAt };
      if (queue) {
        if (rangeKvs(inner, 0).length > 0) return { kind: 'stale', sentAt };
        const newest = rangeKvs(inner, 3);
        const mine = newest[0] !== undefined && BigInt(newest[0].create_revision) === claim.queueRevision;
        if (!mine) return { kind: 'stale', sentAt };
        return {
          kind: 'queued',
          sentAt,
          revision: BigInt(response.header.revision),
          predecessor: newest[1]?.key,
          free: this.#freeIn(layout, rangeKvs(inner, 4)),
        };
      }
      const free = this.#freeIn(layout, rangeKvs(inner, 1));
      if (rangeKvs(inner, 0).length > 0) return { kind: 'refused', sentAt, free: undefined };
      if (free === undefined || tries >= SLOT_TRIES || request.signal.aborted) {
        return { kind: 'refused', sentAt, free };
      }
      guess = free;
    }
  }

  /**
   * First in line: one transaction takes slot `slot` if our queue key is still the one we wrote (so our lease is
   * alive) and the slot key is absent, deleting our queue key in the same step; else reads both again.
   */
  async #promote(claim: PermitClaim, slot: number, given?: TrackedLease): Promise<Standing<PermitWait>> {
    const { layout, queueKey, value } = claim;
    const lease = given ?? (await this.#holderFor(claim));
    if (!lease) return GONE;
    claim.holder = lease;
    const hintKey = hintKeyOf(layout);
    let target = slot;
    for (let tries = 1; ; tries++) {
      const key = slotKey(layout, target);
      const sentAt = this.#requests.clock.monotonic();
      claim.slot = target;
      this.#hints.add(hintKey, target);
      let response: TxnResponseLike;
      try {
        response = await this.#write(
          claim,
          'acquire',
          {
            compare: [createdAt(queueKey, claim.queueRevision), createdAt(key, 0n)],
            success: [
              { request_delete_range: { key: queueKey } },
              { request_put: { key, value, lease: lease.id } },
            ],
            failure: [keysOnly(queueKey), keysOnly(layout.slots, layout.slotsEnd)],
          },
          (late) => this.#learnPromoted(claim, late),
        );
      } catch (error) {
        if (!isLeaseNotFound(error)) throw error;
        claim.slot = undefined;
        await this.#findLost([lease, claim.lease]);
        return GONE;
      } finally {
        this.#hints.remove(hintKey, target);
      }
      this.#learnPromoted(claim, response);
      claim.roundTripMs = this.#requests.clock.monotonic() - sentAt;
      if (response.succeeded) return this.#grant(claim, lease);
      const own = rangeKvs(response, 0)[0];
      if (own === undefined || BigInt(own.create_revision) !== claim.queueRevision) return GONE;
      const free = this.#freeIn(layout, rangeKvs(response, 1));
      if (free === undefined)
        return this.#behind(claim, { slotsFrom: BigInt(response.header.revision) + 1n });
      if (tries >= SLOT_TRIES) return PAUSE;
      target = free;
    }
  }

  /**
   * One read of where the claim stands. The comparison "every queue key was created at or after ours" holds exactly
   * when ours is first (an empty queue fails it); then the slot keys are read, else the queue key just before ours.
   */
  async #position(claim: PermitClaim, at: number): Promise<Standing<PermitWait>> {
    const { layout, queueKey, queueRevision, request } = claim;
    const clock = this.#requests.clock;
    let response: TxnResponseLike;
    try {
      response = await this.#requests.run(
        'acquire',
        (options) =>
          this.#kv.txn(
            {
              compare: [
                {
                  key: layout.queue,
                  range_end: layout.queueEnd,
                  target: 'Create',
                  result: 'Greater',
                  create_revision: String(queueRevision - 1n),
                },
              ],
              success: [keysOnly(queueKey), keysOnly(layout.slots, layout.slotsEnd)],
              failure: [
                keysOnly(queueKey),
                {
                  request_range: {
                    ...byCreate(layout.queue, layout.queueEnd, 'Descend', 1),
                    max_create_revision: String(queueRevision - 1n),
                  },
                },
              ],
            },
            options,
          ),
        { signal: request.signal },
      );
    } catch (error) {
      if (request.signal.aborted || clock.monotonic() >= claim.deadline) throw error;
      return PAUSE;
    }
    claim.roundTripMs = clock.monotonic() - at;
    const own = rangeKvs(response, 0)[0];
    if (own === undefined || BigInt(own.create_revision) !== queueRevision) return GONE;
    const revision = BigInt(response.header.revision);
    if (!response.succeeded) {
      const predecessor = rangeKvs(response, 1)[0]?.key;
      return predecessor ? this.#behind(claim, { predecessor, fromRevision: revision + 1n }) : PAUSE;
    }
    const free = this.#freeIn(layout, rangeKvs(response, 1));
    if (free === undefined) return this.#behind(claim, { slotsFrom: revision + 1n });
    return this.#promote(claim, free);
  }

  /** The lowest slot a read of the slot keys shows free; what it shows taken is the next guess's hint. */
  #freeIn(layout: SemaphoreLayout, kvs: readonly KeyValueLike[]): number | undefined {
    const taken = new Set<number>();
    for (const kv of kvs) {
      const slot = slotOf(layout, kv.key);
      if (slot !== undefined) taken.add(slot);
    }
    this.#hints.saw(hintKeyOf(layout), taken, this.#requests.clock.monotonic());
    for (let slot = 0; slot < layout.permits; slot++) if (!taken.has(slot)) return slot;
    return undefined;
  }

  /** A write of the claim's keys: `writing` is set until etcd answers, even after core gave up on it. */
  #write(
    claim: PermitClaim,
    what: string,
    txn: Parameters<KvClientLike['txn']>[0],
    onLate: (late: TxnResponseLike) => void,
  ): Promise<TxnResponseLike> {
    const settled = (): void => {
      claim.writing = false;
    };
    claim.writing = true;
    return this.#requests.run(
      what,
      (options) => {
        const sent = this.#kv.txn(txn, options);
        sent.then(settled, settled);
        return sent;
      },
      { signal: claim.request.signal, onLate },
    );
  }

  /** What an enqueue answer (also one that came after we gave up) says about the claim's keys. */
  #learnEntered(claim: PermitClaim, response: TxnResponseLike, queue: boolean): void {
    const inner = response.succeeded ? response.responses[0]?.response_txn : undefined;
    if (!inner) {
      // Refused for another limit: nothing was written.
      claim.slot = undefined;
      if (queue) claim.queued = false;
      return;
    }
    if (inner.succeeded) {
      claim.slotRevision = BigInt(response.header.revision);
      if (queue) claim.queued = false;
      return;
    }
    claim.slot = undefined;
    if (!queue) return;
    const own = rangeKvs(inner, 2)[0];
    if (own !== undefined) claim.queueRevision = BigInt(own.create_revision);
  }

  /** What a promotion's answer says: on success the slot is ours and the queue key is gone. */
  #learnPromoted(claim: PermitClaim, response: TxnResponseLike): void {
    if (!response.succeeded) {
      claim.slot = undefined;
      return;
    }
    claim.slotRevision = BigInt(response.header.revision);
    claim.queued = false;
    this.#freeNumber(claim);
  }

  /** Comparisons: no key of the semaphore outside this limit's directory. */
  #sameLimit(layout: SemaphoreLayout): CompareLike[] {
    return [isEmpty(layout.directory, layout.limitDirectory), isEmpty(layout.limitEnd, layout.directoryEnd)];
  }

  /** Reads of one key of the semaphore under another limit, below and above this limit's directory. */
  #otherLimits(layout: SemaphoreLayout): RequestOpLike[] {
    return [
      {
        request_range: { key: layout.directory, range_end: layout.limitDirectory, limit: 1, keys_only: true },
      },
      { request_range: { key: layout.limitEnd, range_end: layout.directoryEnd, limit: 1, keys_only: true } },
    ];
  }

  /** The refusal for the key of another limit that the answer's first two ranges (see `#otherLimits`) hold. */
  #mismatch(layout: SemaphoreLayout, response: TxnResponseLike): Error {
    const other = otherLimitKey(response);
    if (!other)
      return transportError('acquire', new Error('refused, but no key under another limit was read'));
    // A key under the semaphore's directory that this package did not write has no limit to report: 0.
    return new PermitsMismatchError(layout.name, layout.permits, limitOf(layout, other.key) ?? 0);
  }

  /** Deletes our stale queue key by the create revision the failed enqueue read, before writing it afresh. */
  async #deleteQueueKey(claim: PermitClaim, options: { readonly signal?: AbortSignal }): Promise<void> {
    const { queueKey, queueRevision } = claim;
    await this.#requests.run(
      'release',
      (call) =>
        this.#kv.txn(
          {
            compare: queueRevision > 0n ? [createdAt(queueKey, queueRevision)] : [],
            success: [{ request_delete_range: { key: queueKey } }],
          },
          call,
        ),
      options,
    );
    claim.queueRevision = 0n;
    claim.queued = false;
  }

  /** Queued: the lease is kept alive while the claim waits (nobody else renews a lease that holds no permit). */
  #behind(claim: PermitClaim, wait: PermitWait): Standing<PermitWait> {
    if (!claim.waiting && claim.lease) {
      claim.waiting = true;
      this.#session.addWaiter(claim.lease);
    }
    return { kind: 'behind', wait };
  }

  #grant(claim: PermitClaim, lease: TrackedLease): Standing<PermitWait> {
    this.#stopWaiting(claim);
    const slot = claim.slot;
    if (lease.isLost || slot === undefined) return GONE;
    const token = newOwnershipToken();
    claim.token = token;
    const hintKey = hintKeyOf(claim.layout);
    this.#held.set(token, {
      name: claim.request.name,
      hintKey,
      slot,
      key: slotKey(claim.layout, slot),
      revision: claim.slotRevision,
      lease,
    });
    this.#hints.add(hintKey, slot);
    lease.grants.add(token);
    const grant: Grant = {
      ownershipToken: token,
      fencingToken: claim.slotRevision,
      slot,
      ...validity(lease, claim.startedAt),
      roundTripMs: claim.roundTripMs,
    };
    return { kind: 'first', grant };
  }

  #stopWaiting(claim: PermitClaim): void {
    if (!claim.waiting || !claim.lease) return;
    claim.waiting = false;
    this.#session.removeWaiter(claim.lease);
  }

  #freeNumber(claim: PermitClaim): void {
    if (claim.numberFreed) return;
    claim.numberFreed = true;
    this.#numbers.free(claim.request.name, claim.number);
  }

  #lookup(lease: Lease): HeldPermit | undefined {
    const held = this.#held.get(lease.ownershipToken);
    if (
      !held ||
      held.name !== lease.name ||
      held.revision !== lease.fencingToken ||
      held.slot !== lease.slot
    ) {
      return undefined;
    }
    return held;
  }

  /** Drops a grant from the registry (no more renewals). */
  #forget(token: string): void {
    const held = this.#held.get(token);
    if (!held) return;
    this.#held.delete(token);
    held.lease.grants.delete(token);
    this.#hints.remove(held.hintKey, held.slot);
  }
}

function hintKeyOf(layout: SemaphoreLayout): string {
  return `${layout.permits}/${escapeName(layout.name)}`;
}

function guardedDelete(key: Buffer, guard: CompareLike | undefined): RequestOpLike {
  return { request_txn: { compare: guard ? [guard] : [], success: [{ request_delete_range: { key } }] } };
}

/** A key under another limit, from the first two ranges of an answer (see `#otherLimits`). */
function otherLimitKey(response: TxnResponseLike): KeyValueLike | undefined {
  return rangeKvs(response, 0)[0] ?? rangeKvs(response, 1)[0];
}

/** The nested transaction's answer inside an enqueue's. */
function innerOf(response: TxnResponseLike): TxnResponseLike {
  const inner = response.responses[0]?.response_txn;
  if (!inner) throw transportError('acquire', new Error('nested transaction answer missing'));
  return inner;
}

function asPermitRequest(request: AcquireRequest): PermitRequest {
  const permits = (request as Partial<PermitRequest>).permits;
  if (typeof permits !== 'number')
    throw new InvalidArgumentError('request.permits', 'is required for a permit');
  return request as PermitRequest;
}
