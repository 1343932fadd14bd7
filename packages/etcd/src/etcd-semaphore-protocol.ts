import { randomUUID } from 'node:crypto';
import type { AcquireRequest, Lease, PermitsInfo, RenewRequest, RenewResult } from '@dlock/core';
import { TransportError } from '@dlock/core';
import { type QueueDriver, type Standing, unlessAborted } from '@dlock/core/adapter';
import { isLeaseNotFound } from './errors.js';
import { type DriverParts, EtcdDriver } from './etcd-driver.js';
import type { KeepAliveOutcome, TrackedLease } from './etcd-session.js';
import { assertFullTtl, type GrantRecord } from './grants.js';
import { semaphoreLayout, slotKey, slotOf } from './keys.js';
import {
  asPermitRequest,
  type Entered,
  hintKeyOf,
  type Next,
  PermitSlots,
  type PermitWait,
  type SlotClaim,
} from './permit-slots.js';
import { Slots } from './slots.js';
import { mayStillLand } from './txns.js';
import { encodePermitRecord } from './values.js';
import { GONE, leaseOf, newClaim, PAUSE, refreshed } from './waits.js';

/** One attempt at a permit: its queue key (named before any I/O) and the slot it last tried or holds. */
export interface PermitClaim extends SlotClaim {
  /** The queue key's number among this service's waiters of the semaphore (keys are reused, as for locks). */
  readonly number: number;
  /** The lease the last slot key put named: the claim's own, or the grants' session. */
  holder: TrackedLease | undefined;
  numberFreed: boolean;
  /** First in line: the slot whose delete woke us, tried first by the re-check. */
  freed: number | undefined;
}

/** A permit this service holds; `hintKey` names its semaphore and limit in `SlotHints`. */
interface HeldPermit extends GrantRecord {
  readonly slot: number;
  readonly hintKey: string;
}

/**
 * A semaphore on etcd, as core's queue driver (core's `acquireInQueue` runs the loop; this class is its atomic
 * steps, plus renew and release of the permits it granted). Keys (see `semaphoreLayout`): a holder is the key of its
 * slot, created under its lease only if absent (`create_revision == 0`), so a slot has one holder at a time and its
 * fencing token is the key's create revision: etcd's global revision, raft-logged, strictly increasing from one
 * holder of a slot to the next. A waiter is a queue key under its lease; waiters are served in create-revision
 * order. The first waiter alone watches the slot keys for a delete; every other waiter watches only the queue key
 * just before its own. A waiter takes a slot and deletes its queue key in one transaction, so a holder has no queue
 * key and the next waiter's watch fires exactly then: one wake-up per release, in FIFO order. Every slot taken
 * without queueing compares the queue as empty, so a caller that does not wait never overtakes one that does; the
 * transactions are `PermitSlots`.
 */
export class EtcdSemaphoreProtocol
  extends EtcdDriver<HeldPermit>
  implements QueueDriver<PermitClaim, PermitWait>
{
  readonly #slots: PermitSlots<PermitClaim>;
  /** Queue key numbers per semaphore name. */
  readonly #numbers = new Slots();

  constructor(parts: DriverParts) {
    super(parts, { forgotten: (held) => this.#slots.hints.remove(held.hintKey, held.slot) });
    this.#slots = new PermitSlots<PermitClaim>(this.txns, parts.prefix, (claim) => this.#freeNumber(claim));
  }

  /** Names the claim's queue key (a number of the name free in this service) and the value of every key it writes. */
  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): PermitClaim {
    const permitRequest = asPermitRequest(request);
    const layout = semaphoreLayout(this.prefix, request.name, permitRequest.permits);
    const number = this.#numbers.take(request.name);
    const value = encodePermitRecord({
      permits: permitRequest.permits,
      owner: request.ownerId,
      attempt: randomUUID(),
      ...(request.metadata === undefined ? {} : { metadata: request.metadata }),
    });
    return {
      ...newClaim(permitRequest, startedAt),
      layout,
      number,
      queueKey: Buffer.concat([layout.queue, Buffer.from(`${this.serviceId}_${number}`, 'latin1')]),
      value,
      holder: undefined,
      queued: false,
      queueRevision: 0n,
      slot: undefined,
      slotRevision: 0n,
      numberFreed: false,
      freed: undefined,
    };
  }

  /**
   * Takes a lease (or joins the session), then one transaction: a free slot if nobody queues, else (when waiting)
   * a queue key. A first waiter that saw a free slot takes it at once with one more transaction. On a session the
   * queue key rides on the waiters' session, opened or kept alive first (one more round trip) when there is none or
   * less than half its TTL is known to be left.
   */
  async enqueue(claim: PermitClaim, { queue }: { readonly queue: boolean }): Promise<Standing<PermitWait>> {
    const { request } = claim;
    const { signal } = request;
    const { lease: holder, refresh } = await this.session.forAcquire(request.ttlMs, claim.startedAt, signal);
    claim.holder = holder;
    const waitersTtlS = this.session.sessionTtlS(request.ttlMs);
    let waiters = !queue ? undefined : holder.session ? this.session.liveWaiters(waitersTtlS) : holder;
    claim.lease = waiters ?? holder;
    let entered: Entered;
    try {
      entered = await this.#slots.enter(claim, holder, waiters);
      if (queue && !waiters && entered.kind === 'refused') {
        waiters = await unlessAborted(this.session.waiters(waitersTtlS), signal);
        claim.lease = waiters;
        entered = await this.#slots.enter(claim, holder, waiters);
      }
    } catch (error) {
      // Not awaited: a refresh whose answer is lost must not hold up taking our keys back.
      refresh?.catch(() => undefined);
      if (!isLeaseNotFound(error)) throw error;
      await this.session.findLost([holder, waiters]);
      return GONE;
    }
    if (entered.kind === 'gone') return GONE;
    const outcome = await refreshed(refresh, signal);
    claim.roundTripMs = this.clock.monotonic() - entered.sentAt;
    if (outcome && !(outcome instanceof Error) && !outcome.alive) return GONE;
    if (entered.kind === 'refused') return { kind: 'behind', wait: { pauseMs: 0 } };
    let standing: Standing<PermitWait>;
    if (entered.kind === 'granted') {
      // Granted by the enqueue itself: no queue key was written, so its number is free for the next claim.
      this.#freeNumber(claim);
      standing = this.#grant(claim, holder);
    } else if (entered.predecessor !== undefined) {
      const wait = { predecessor: entered.predecessor, fromRevision: entered.revision + 1n };
      return this.waits.behind(claim, wait);
    } else if (entered.free === undefined) {
      return this.waits.behind(claim, { slotsFrom: entered.revision + 1n });
    } else standing = await this.#take(claim, entered.free, holder);
    if (standing.kind === 'first') assertFullTtl(outcome, holder, claim);
    return standing;
  }

  /**
   * Re-reads where the claim stands and takes a slot if it is first and one is free. Our queue key still existing
   * with our revision, and the grant's lease confirmed recently (a keep-alive goes first when its last confirmation
   * is old), together are the lease check etcd's own mutex lacked (etcd #11456). A failed read pauses and reads
   * again, keeping the claim's place, until the wait's deadline; a failed take ends the attempt (core takes back
   * what it may have written). On a session the queue key's lease is the waiters' session, which no grant rests on:
   * the take compares the queue key (alive, so its lease is) and refreshes the grants' session first if needed.
   */
  async check(claim: PermitClaim): Promise<Standing<PermitWait>> {
    const { signal } = claim.request;
    const lease = leaseOf(claim);
    const at = this.clock.monotonic();
    if (!lease.session && !this.waits.isFresh(claim, lease, at)) {
      let confirmed: KeepAliveOutcome;
      try {
        confirmed = await unlessAborted(this.session.keepAlive(lease, at), signal);
      } catch (error) {
        if (signal.aborted || this.clock.monotonic() >= claim.deadline) throw error;
        return PAUSE;
      }
      if (!confirmed.alive) return GONE;
    }
    const freed = claim.freed;
    claim.freed = undefined;
    if (freed !== undefined) return this.#take(claim, freed);
    return this.#next(claim, await this.#slots.position(claim, at));
  }

  /**
   * Sleeps until the key we wait on is deleted (the predecessor's queue key, or for the first waiter any slot key;
   * watched from the revision after our read, so a delete in between is not missed), the watch resets, the poll
   * floor or `ms` passes, or our lease is lost. A slot key's delete names the slot, which the re-check tries first.
   */
  wait(
    claim: PermitClaim,
    wait: PermitWait,
    ms: number,
    signal: AbortSignal,
  ): Promise<Standing<PermitWait> | undefined> {
    const { layout } = claim;
    let watch: ((notify: () => void) => () => void) | undefined;
    if ('predecessor' in wait) {
      watch = this.waits.deletes({ key: wait.predecessor, startRevision: wait.fromRevision });
    } else if ('slotsFrom' in wait) {
      const slots = { key: layout.slots, rangeEnd: layout.slotsEnd, startRevision: wait.slotsFrom };
      watch = this.waits.deletes(slots, (key) => {
        claim.freed = slotOf(layout, key);
      });
    }
    const pauseMs = 'pauseMs' in wait ? wait.pauseMs : undefined;
    return this.waits.sleep(leaseOf(claim), { ms, signal, pauseMs, watch });
  }

  /**
   * Takes the claim's keys out (giving the permit back if it was granted): revokes a lease of its own, which
   * deletes them in the same raft entry; on a session, one transaction deletes the queue key and the slot key last
   * tried, each by a guard (see `PermitSlots.leaveDeletes`). Each try is bounded by `requestTimeoutMs`. While a
   * write may still land the try counts as failed, so that core's background retry deletes once more after it.
   */
  async leave(claim: PermitClaim): Promise<void> {
    this.abandon(claim);
    const { holder, lease: waiters } = claim;
    if (!holder?.session) return this.revokeOwn(holder, () => this.#freeNumber(claim));
    const writing = mayStillLand(claim, this.clock.monotonic());
    const known = claim.queueRevision > 0n;
    // A key on a lost lease went with it.
    const queued = claim.queued && waiters !== undefined && !waiters.isLost;
    const deletes = this.#slots.leaveDeletes(claim, queued, holder);
    if (deletes.length > 0) {
      await this.txns.run('release', { success: deletes }, { timeoutMs: this.txns.requests.timeoutMs });
    }
    if (known || !queued) this.#freeNumber(claim);
    if (writing) throw new TransportError('etcd acquire: a write given up on may still land');
  }

  /** One keep-alive of the permit's lease, or a share of a recent one on a session. */
  renew(request: RenewRequest): Promise<RenewResult> {
    return this.grants.renew(request);
  }

  /**
   * A lease of its own is revoked (deleting the slot key); a session's slot key is deleted if its create revision
   * is still the permit's token. Either wakes the first waiter, whose watch sees the delete.
   */
  release(lease: Lease): Promise<boolean> {
    return this.grants.release(lease);
  }

  /** Free slots of the semaphore now, in one read (see `PermitSlots.available`). */
  available(name: string, permits: number): Promise<number> {
    return this.#slots.available(name, permits);
  }

  /** The holders and waiters now, in one read (see `PermitSlots.inspect`). */
  inspect(name: string, permits: number): Promise<PermitsInfo> {
    return this.#slots.inspect(name, permits);
  }

  /** A first waiter takes slot `slot` (see `PermitSlots.take`), on `given` or the lease `#holderFor` finds. */
  async #take(claim: PermitClaim, slot: number, given?: TrackedLease): Promise<Standing<PermitWait>> {
    const lease = given ?? (await this.#holderFor(claim));
    if (!lease) return GONE;
    claim.holder = lease;
    try {
      return await this.#next(claim, await this.#slots.take(claim, slot, lease), lease);
    } catch (error) {
      if (!isLeaseNotFound(error)) throw error;
      claim.slot = undefined;
      await this.session.findLost([lease, claim.lease]);
      return GONE;
    }
  }

  /** What core is told about where a read or a take left the claim. */
  #next(
    claim: PermitClaim,
    next: Next,
    holder?: TrackedLease,
  ): Promise<Standing<PermitWait>> | Standing<PermitWait> {
    switch (next.kind) {
      case 'free':
        return this.#take(claim, next.slot);
      case 'behind':
        return this.waits.behind(claim, next.wait);
      case 'pause':
        return PAUSE;
      case 'taken':
        return holder ? this.#grant(claim, holder) : GONE;
      case 'gone':
        return GONE;
    }
  }

  /**
   * The lease a first waiter's slot key is written with: its own lease, or the grants' session, refreshed first
   * when its known life is shorter than the TTL (a grant's validity counts from the lease's last confirmation).
   * Undefined when etcd says the session is gone.
   */
  async #holderFor(claim: PermitClaim): Promise<TrackedLease | undefined> {
    const { holder, request } = claim;
    if (holder && !holder.session) return holder;
    const now = this.clock.monotonic();
    const { lease, refresh } = await this.session.forAcquire(request.ttlMs, now, request.signal);
    if (refresh && !(await unlessAborted(refresh, request.signal)).alive) return undefined;
    return lease;
  }

  #grant(claim: PermitClaim, lease: TrackedLease): Standing<PermitWait> {
    this.waits.stop(claim);
    const slot = claim.slot;
    if (lease.isLost || slot === undefined) return GONE;
    const { request, layout, slotRevision } = claim;
    const [hintKey, key] = [hintKeyOf(layout), slotKey(layout, slot)];
    const held = { name: request.name, hintKey, slot, key, revision: slotRevision, lease };
    const grant = this.grants.add(held, claim);
    this.#slots.hints.add(hintKey, slot);
    return { kind: 'first', grant };
  }

  #freeNumber(claim: PermitClaim): void {
    if (claim.numberFreed) return;
    claim.numberFreed = true;
    this.#numbers.free(claim.request.name, claim.number);
  }
}
