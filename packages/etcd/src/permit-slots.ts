import type { AcquireRequest, PermitHolder, PermitRequest, PermitsInfo } from '@dlock/core';
import { InvalidArgumentError, PermitsMismatchError } from '@dlock/core';
import type {
  CompareLike,
  KeyValueLike,
  RequestOpLike,
  TxnRequestLike,
  TxnResponseLike,
} from './client-like.js';
import { transportError } from './errors.js';
import type { TrackedLease } from './etcd-session.js';
import { escapeName, limitOf, type SemaphoreLayout, semaphoreLayout, slotKey, slotOf } from './keys.js';
import { SlotHints } from './slot-hints.js';
import { byCreate, createdAt, guardedDelete, isEmpty, keysOnly, rangeKvs, type Txns } from './txns.js';
import { decodePermitRecord } from './values.js';
import type { QueueClaim } from './waits.js';

/** The part of a permit attempt its transactions read and update: its keys, and what etcd said about them. */
export interface SlotClaim extends QueueClaim {
  readonly request: PermitRequest;
  readonly layout: SemaphoreLayout;
  readonly queueKey: Buffer;
  /** Every key this attempt writes has this value; its random attempt id tells this attempt's slot key apart. */
  readonly value: Buffer;
  /** A put of the queue key was sent and the key has not been taken out by us since. */
  queued: boolean;
  /** Create revision of the queue key; 0 while unknown. */
  queueRevision: bigint;
  /** The slot a put was last sent for, landed or not; undefined once etcd answered that it did not land. */
  slot: number | undefined;
  /** Create revision of the slot key once etcd confirmed the put: the fencing token. */
  slotRevision: bigint;
}

/**
 * What a queued claim waits for: the queue key just ahead to be deleted; for the first in line, a slot key to be
 * deleted (watched from a revision); or a pause.
 */
export type PermitWait =
  | { readonly predecessor: Buffer; readonly fromRevision: bigint }
  | { readonly slotsFrom: bigint }
  | { readonly pauseMs: number };

/** What the enqueue transaction found (a stale queue key of ours, deleted and written again, is `gone`). */
export type Entered =
  | { readonly kind: 'granted'; readonly sentAt: number }
  | { readonly kind: 'gone'; readonly sentAt: number }
  /** Queued (`predecessor` unset: first in line); `free` is a slot nobody held at the write. */
  | {
      readonly kind: 'queued';
      readonly sentAt: number;
      readonly revision: bigint;
      readonly predecessor: Buffer | undefined;
      readonly free: number | undefined;
    }
  /** Not queued (`queue: false`): someone waits, or no slot is free. */
  | { readonly kind: 'refused'; readonly sentAt: number; readonly free: number | undefined };

/** Where a read or a take left a queued claim: a slot free to take, a wait, a pause, taken, or gone. */
export type Next =
  | { readonly kind: 'free'; readonly slot: number }
  | { readonly kind: 'behind'; readonly wait: PermitWait }
  | { readonly kind: 'pause' | 'taken' | 'gone' };

/** Tries at a slot seen free before giving the turn back to the loop: each failure means another took a slot. */
const SLOT_TRIES = 3;

/**
 * The semaphore's transactions and what their answers say. Every write compares the semaphore's keys outside this
 * limit's directory as absent (else reads one, and the limit found is refused), so holders and waiters of one
 * semaphore always share one limit; a slot is guessed free from `SlotHints`.
 */
export class PermitSlots<C extends SlotClaim> {
  readonly #txns: Txns;
  readonly #prefix: string;
  /** Slots this service holds or is trying, per semaphore and limit: the first slot to try is one of the others. */
  readonly hints = new SlotHints();
  /** A claim's queue key was deleted by the take that granted it. */
  readonly #promoted: (claim: C) => void;

  constructor(txns: Txns, prefix: string, promoted: (claim: C) => void) {
    this.#txns = txns;
    this.#prefix = prefix;
    this.#promoted = promoted;
  }

  /**
   * The enqueue transaction, and once more after deleting a stale queue key of ours. Inner comparison: nobody queued
   * and the slot we guess free is free → the slot key is created (uncontended: one write). Otherwise, when waiting
   * (`waiters` set): our queue key is read as it was, written, read again (its create revision is our place), and
   * the two newest queue keys (the one before ours is the one to watch) and the slot keys are read; when not
   * waiting: only the first queue key and the slot keys are read, and a slot seen free is tried again. Before either,
   * a slot key holding this attempt's value is taken as ours: etcd applied this write once and etcd3 sent it again.
   */
  async enter(claim: C, holder: TrackedLease, waiters: TrackedLease | undefined): Promise<Entered> {
    const entered = await this.#enter(claim, holder, waiters);
    if (entered.kind !== 'gone') return entered;
    await this.#txns.deleteKey(claim.queueKey, claim.queueRevision > 0n ? claim.queueRevision : undefined, {
      signal: claim.request.signal,
    });
    claim.queueRevision = 0n;
    claim.queued = false;
    return this.#enter(claim, holder, waiters);
  }

  /**
   * First in line: takes slot `slot` on `lease` if our queue key is still the one we wrote (so our lease is alive)
   * and the slot key is absent, deleting our queue key in the same step; else reads both again (and the slot key
   * with its value: a re-sent copy of a take already applied finds its own key), and tries a slot seen free.
   */
  async take(claim: C, slot: number, lease: TrackedLease): Promise<Next> {
    const { layout, queueKey, value } = claim;
    let target = slot;
    for (let tries = 1; ; tries++) {
      const key = slotKey(layout, target);
      const sentAt = this.#txns.requests.clock.monotonic();
      const response = await this.#trySlot(
        claim,
        target,
        {
          compare: [createdAt(queueKey, claim.queueRevision), createdAt(key, 0n)],
          success: [
            { request_delete_range: { key: queueKey } },
            { request_put: { key, value, lease: lease.id } },
          ],
          failure: [keysOnly(queueKey), keysOnly(layout.slots, layout.slotsEnd), { request_range: { key } }],
        },
        (answer) => this.#learnTaken(claim, answer),
      );
      claim.roundTripMs = this.#txns.requests.clock.monotonic() - sentAt;
      if (response.succeeded || ownSlotKey(claim, rangeKvs(response, 2))) return { kind: 'taken' };
      const own = rangeKvs(response, 0)[0];
      if (own === undefined || BigInt(own.create_revision) !== claim.queueRevision) return { kind: 'gone' };
      const free = this.#freeIn(layout, rangeKvs(response, 1));
      if (free === undefined) {
        return { kind: 'behind', wait: { slotsFrom: BigInt(response.header.revision) + 1n } };
      }
      if (tries >= SLOT_TRIES) return { kind: 'pause' };
      target = free;
    }
  }

  /**
   * One read of where the claim stands. The comparison "every queue key was created at or after ours" holds exactly
   * when ours is first (an empty queue fails it); then the slot keys are read, else the queue key just before ours.
   * A failed read is a pause until the wait's deadline.
   */
  async position(claim: C, at: number): Promise<Next> {
    const { layout, queueKey, queueRevision, request } = claim;
    const clock = this.#txns.requests.clock;
    const before = String(queueRevision - 1n);
    let response: TxnResponseLike;
    try {
      response = await this.#txns.run(
        'acquire',
        {
          compare: [
            {
              key: layout.queue,
              range_end: layout.queueEnd,
              target: 'Create',
              result: 'Greater',
              create_revision: before,
            },
          ],
          success: [keysOnly(queueKey), keysOnly(layout.slots, layout.slotsEnd)],
          failure: [
            keysOnly(queueKey),
            {
              request_range: {
                ...byCreate(layout.queue, layout.queueEnd, 'Descend', 1),
                max_create_revision: before,
              },
            },
          ],
        },
        { signal: request.signal },
      );
    } catch (error) {
      if (request.signal.aborted || clock.monotonic() >= claim.deadline) throw error;
      return { kind: 'pause' };
    }
    claim.roundTripMs = clock.monotonic() - at;
    const own = rangeKvs(response, 0)[0];
    if (own === undefined || BigInt(own.create_revision) !== queueRevision) return { kind: 'gone' };
    const revision = BigInt(response.header.revision);
    if (!response.succeeded) {
      const predecessor = rangeKvs(response, 1)[0]?.key;
      return predecessor
        ? { kind: 'behind', wait: { predecessor, fromRevision: revision + 1n } }
        : { kind: 'pause' };
    }
    const free = this.#freeIn(layout, rangeKvs(response, 1));
    return free === undefined
      ? { kind: 'behind', wait: { slotsFrom: revision + 1n } }
      : { kind: 'free', slot: free };
  }

  /**
   * The deletes that take a claim's keys out, in one transaction: the queue key (guarded by its create revision when
   * known; its name is this service's alone) and the slot key last tried (guarded by its create revision, or when
   * that is unknown by this attempt's value, so another holder's key is never hit).
   */
  leaveDeletes(claim: C, queued: boolean, holder: TrackedLease): RequestOpLike[] {
    const deletes: RequestOpLike[] = [];
    if (queued) {
      const known = claim.queueRevision > 0n;
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
    return deletes;
  }

  /**
   * How many slots no key holds, in one read that also looks for keys written with another limit. A slot key can
   * outlive its expired lease by up to etcd's lessor interval (500 ms), and counts as held until then. The keys are
   * read, not counted: one under the slot prefix that names no slot of this limit (another tool's) holds nothing an
   * acquire competes for, and `inspect` does not list it.
   */
  async available(name: string, permits: number): Promise<number> {
    const layout = semaphoreLayout(this.#prefix, name, permits);
    const response = await this.#txns.run('available permits', {
      success: [...otherLimits(layout), keysOnly(layout.slots, layout.slotsEnd)],
    });
    if (otherLimitKey(response)) throw mismatch(layout, response);
    const held = new Set<number>();
    for (const kv of rangeKvs(response, 2)) {
      const slot = slotOf(layout, kv.key);
      if (slot !== undefined) held.add(slot);
    }
    return permits - held.size;
  }

  /**
   * The holders and the queue's length, in one read that also looks for keys written with another limit: each slot
   * key's record (owner id, metadata) and create revision (the fencing token), and the queue keys counted. Every key
   * that names a slot is a holder, as `available` counts it, with owner id '' when its value is not a permit record. No
   * `expiresInMs`: etcd tells a lease's remaining life only in whole seconds, and a key outlives its expired lease by
   * up to the lessor's interval (500 ms), counting as held until then (as in `available`).
   */
  async inspect(name: string, permits: number): Promise<PermitsInfo> {
    const layout = semaphoreLayout(this.#prefix, name, permits);
    const response = await this.#txns.run('inspect permits', {
      success: [
        ...otherLimits(layout),
        { request_range: { key: layout.slots, range_end: layout.slotsEnd } },
        { request_range: { key: layout.queue, range_end: layout.queueEnd, count_only: true } },
      ],
    });
    if (otherLimitKey(response)) throw mismatch(layout, response);
    const held: PermitHolder[] = [];
    for (const kv of rangeKvs(response, 2)) {
      const slot = slotOf(layout, kv.key);
      if (slot === undefined) continue;
      const record = decodePermitRecord(kv.value);
      // A slot key without our record (another tool's, or written by hand) still fills the slot: acquire creates a
      // slot key only where none exists. Its owner is unknown, reported as '', which no client's ownerId can be.
      const holder = { slot, ownerId: record?.owner ?? '', fencingToken: BigInt(kv.create_revision) };
      held.push(record?.metadata === undefined ? holder : { ...holder, metadata: record.metadata });
    }
    held.sort((a, b) => a.slot - b.slot);
    const waiters = Number(response.responses[3]?.response_range?.count ?? 0);
    return { permits, held, waiters: Number.isSafeInteger(waiters) ? waiters : 0 };
  }

  /** `enter` once; `gone` when our queue key was already there. */
  async #enter(claim: C, holder: TrackedLease, waiters: TrackedLease | undefined): Promise<Entered> {
    const { layout, queueKey, value, request } = claim;
    const queue = waiters !== undefined;
    let guess = this.hints.guess(hintKeyOf(layout), layout.permits, this.#txns.requests.clock.monotonic());
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
      const sentAt = this.#txns.requests.clock.monotonic();
      if (queue) claim.queued = true;
      const response = await this.#trySlot(
        claim,
        slot,
        {
          compare: [
            isEmpty(layout.directory, layout.limitDirectory),
            isEmpty(layout.limitEnd, layout.directoryEnd),
          ],
          success: [
            {
              request_txn: {
                compare: [isEmpty(layout.queue, layout.queueEnd), createdAt(key, 0n)],
                success: [{ request_put: { key, value, lease: holder.id } }],
                // A slot key with this attempt's value is this very write, applied once already and sent again
                // (etcd3 re-sends after a connection reset): it is read, and nothing more is written.
                failure: [
                  {
                    request_txn: {
                      compare: [{ key, target: 'Value', result: 'Equal', value }],
                      success: [keysOnly(key)],
                      failure,
                    },
                  },
                ],
              },
            },
          ],
          failure: otherLimits(layout),
        },
        (answer) => learnEntered(claim, answer, queue),
      );
      if (!response.succeeded) throw mismatch(layout, response);
      const inner = innerOf(response);
      if (inner.succeeded) return { kind: 'granted', sentAt };
      // The refused branch: our own slot key found (a re-sent copy of this write), or the reads as before.
      const found = innerOf(inner);
      if (found.succeeded) return { kind: 'granted', sentAt };
      if (queue) {
        if (rangeKvs(found, 0).length > 0) return { kind: 'gone', sentAt };
        const newest = rangeKvs(found, 3);
        const mine = newest[0] !== undefined && BigInt(newest[0].create_revision) === claim.queueRevision;
        if (!mine) return { kind: 'gone', sentAt };
        return {
          kind: 'queued',
          sentAt,
          revision: BigInt(response.header.revision),
          predecessor: newest[1]?.key,
          free: this.#freeIn(layout, rangeKvs(found, 4)),
        };
      }
      const free = this.#freeIn(layout, rangeKvs(found, 1));
      if (rangeKvs(found, 0).length > 0) return { kind: 'refused', sentAt, free: undefined };
      if (free === undefined || tries >= SLOT_TRIES || request.signal.aborted) {
        return { kind: 'refused', sentAt, free };
      }
      guess = free;
    }
  }

  /**
   * A write that tries slot `slot` (counted as used here while in flight, so a concurrent guess picks another).
   * `learn` hears its answer, even one that comes after the claim gave up on it.
   */
  async #trySlot(
    claim: C,
    slot: number,
    txn: TxnRequestLike,
    learn: (answer: TxnResponseLike) => void,
  ): Promise<TxnResponseLike> {
    const hintKey = hintKeyOf(claim.layout);
    claim.slot = slot;
    this.hints.add(hintKey, slot);
    let response: TxnResponseLike;
    try {
      response = await this.#txns.write(claim, 'acquire', txn, learn);
    } finally {
      this.hints.remove(hintKey, slot);
    }
    learn(response);
    return response;
  }

  /** The lowest slot a read of the slot keys shows free; what it shows taken is the next guess's hint. */
  #freeIn(layout: SemaphoreLayout, kvs: readonly KeyValueLike[]): number | undefined {
    const taken = new Set<number>();
    for (const kv of kvs) {
      const slot = slotOf(layout, kv.key);
      if (slot !== undefined) taken.add(slot);
    }
    this.hints.saw(hintKeyOf(layout), taken, this.#txns.requests.clock.monotonic());
    for (let slot = 0; slot < layout.permits; slot++) if (!taken.has(slot)) return slot;
    return undefined;
  }

  /**
   * What a take's answer says: on success the slot is ours and the queue key is gone. A failed take that reads the
   * slot key with this attempt's value was applied once already and sent again (etcd3 re-sends after a connection
   * reset): the slot is ours all the same, created when that first copy was applied.
   */
  #learnTaken(claim: C, response: TxnResponseLike): void {
    const own = response.succeeded ? undefined : ownSlotKey(claim, rangeKvs(response, 2));
    if (!response.succeeded && own === undefined) {
      claim.slot = undefined;
      return;
    }
    claim.slotRevision = own ? BigInt(own.create_revision) : BigInt(response.header.revision);
    claim.queued = false;
    this.#promoted(claim);
  }
}

/** What an enqueue answer (also one that came after we gave up) says about the claim's keys. */
function learnEntered(claim: SlotClaim, response: TxnResponseLike, queue: boolean): void {
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
  const branch = inner.responses[0]?.response_txn;
  if (branch?.succeeded) {
    // Our own slot key, from the first copy of this write: its create revision is the fencing token.
    const mine = rangeKvs(branch, 0)[0];
    if (mine !== undefined) claim.slotRevision = BigInt(mine.create_revision);
    if (queue) claim.queued = false;
    return;
  }
  claim.slot = undefined;
  if (!queue || !branch) return;
  const own = rangeKvs(branch, 2)[0];
  if (own !== undefined) claim.queueRevision = BigInt(own.create_revision);
}

/** The key under which this service counts the slots it holds or tries of a semaphore at a limit. */
export function hintKeyOf(layout: SemaphoreLayout): string {
  return `${layout.permits}/${escapeName(layout.name)}`;
}

/** Reads of one key of the semaphore under another limit, below and above this limit's directory. */
function otherLimits(layout: SemaphoreLayout): RequestOpLike[] {
  return [
    { request_range: { key: layout.directory, range_end: layout.limitDirectory, limit: 1, keys_only: true } },
    { request_range: { key: layout.limitEnd, range_end: layout.directoryEnd, limit: 1, keys_only: true } },
  ];
}

/** A key under another limit, from the first two ranges of an answer (see `otherLimits`). */
function otherLimitKey(response: TxnResponseLike): KeyValueLike | undefined {
  return rangeKvs(response, 0)[0] ?? rangeKvs(response, 1)[0];
}

/** The refusal for the key of another limit that the answer's first two ranges hold. */
function mismatch(layout: SemaphoreLayout, response: TxnResponseLike): Error {
  const other = otherLimitKey(response);
  if (!other) return transportError('acquire', new Error('refused, but no key under another limit was read'));
  // A key under the semaphore's directory that this package did not write has no limit to report: 0.
  return new PermitsMismatchError(layout.name, layout.permits, limitOf(layout, other.key) ?? 0);
}

/** The nested transaction's answer inside an enqueue's. */
function innerOf(response: TxnResponseLike): TxnResponseLike {
  const inner = response.responses[0]?.response_txn;
  if (!inner) throw transportError('acquire', new Error('nested transaction answer missing'));
  return inner;
}

/** The slot key read, if its value is this attempt's: a write of ours that etcd applied. */
function ownSlotKey(claim: SlotClaim, kvs: readonly KeyValueLike[]): KeyValueLike | undefined {
  const kv = kvs[0];
  return kv?.value?.equals(claim.value) ? kv : undefined;
}

export function asPermitRequest(request: AcquireRequest): PermitRequest {
  const permits = (request as Partial<PermitRequest>).permits;
  if (typeof permits !== 'number')
    throw new InvalidArgumentError('request.permits', 'is required for a permit');
  return request as PermitRequest;
}
