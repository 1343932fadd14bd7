import type { AcquireRequest, Grant, Lease, RenewRequest, RenewResult } from '@dlock/core';
import { TransportError } from '@dlock/core';
import {
  type BackgroundRetries,
  type QueueDriver,
  type Standing,
  unlessAborted,
  WakeSignal,
} from '@dlock/core/adapter';
import type { KeyValueLike, KvClientLike, RequestOpLike, TxnResponseLike } from './client-like.js';
import { isLeaseNotFound, transportError } from './errors.js';
import type { EtcdReleaseWatch } from './etcd-release-watch.js';
import type { EtcdSession, KeepAliveOutcome, TrackedLease } from './etcd-session.js';
import { contenderKey, lockDirectory, newOwnershipToken, newServiceId, prefixRangeEnd } from './keys.js';
import type { EtcdRequests } from './requests.js';
import { Slots } from './slots.js';
import { encodeValue } from './values.js';

/** One acquire attempt's place in a lock's queue: a key under the lock's directory, named before any I/O. */
export interface Claim {
  readonly request: AcquireRequest;
  /** When the acquire call began, and when its wait ends (monotonic ms). */
  readonly startedAt: number;
  readonly deadline: number;
  readonly directory: Buffer;
  readonly rangeEnd: Buffer;
  readonly slot: number;
  readonly key: Buffer;
  /** The lease the key is written with; unset until granted (or, in session mode, until the session is open). */
  lease: TrackedLease | undefined;
  /** Create revision of `key`; 0 while unknown (not written yet, or the write's answer is lost). */
  revision: bigint;
  /** A write of `key` is in flight, even one given up on: it may still land. */
  writing: boolean;
  /** Queued, keeping its lease alive. */
  waiting: boolean;
  slotFreed: boolean;
  /** Set once the claim is first in line: the grant's ownership token. */
  token: string | undefined;
  /** Round trip of the last request that decided this claim's turn (its write, or a re-read), in ms. */
  roundTripMs: number;
}

/** What a queued claim waits for: the key just ahead of it to be deleted (watched from a revision), or a pause. */
export type Wait =
  | { readonly predecessor: Buffer; readonly fromRevision: bigint }
  | { readonly pauseMs: number };

/** A lock this service holds: what `renew` and `release` check a core `Lease` against. */
interface HeldLock {
  readonly name: string;
  readonly slot: number;
  readonly key: Buffer;
  readonly revision: bigint;
  readonly lease: TrackedLease;
}

interface Written {
  /** The directory was empty: the write alone made us the holder. */
  readonly first: boolean;
  /** Our key was already there, left over from an earlier attempt. */
  readonly stale: boolean;
  /** The key just before ours, when the write's own reads name it. */
  readonly predecessor: Buffer | undefined;
  readonly revision: bigint;
  readonly sentAt: number;
}

/** A queued claim re-reads its position this often even without a watch event, in case the watch broke silently. */
export const POLL_FLOOR_MS = 5_000;
/** Pause before re-reading after a failed re-read, so an unreachable etcd is not hammered. */
export const RETRY_PAUSE_MS = 100;

const GONE = { kind: 'gone' } as const;
const PAUSE: Standing<Wait> = { kind: 'behind', wait: { pauseMs: RETRY_PAUSE_MS } };

export const byCreate = (
  directory: Buffer,
  rangeEnd: Buffer,
  order: 'Ascend' | 'Descend',
  limit: number,
) => ({
  key: directory,
  range_end: rangeEnd,
  sort_target: 'Create' as const,
  sort_order: order,
  limit,
  keys_only: true,
});

export const rangeKvs = (response: TxnResponseLike, index: number): readonly KeyValueLike[] =>
  response.responses[index]?.response_range?.kvs ?? [];

/** Create revision of our key after the write: the transaction's own revision if it succeeded, else its re-read. */
const ownRevision = (response: TxnResponseLike): string | undefined =>
  response.succeeded ? response.header.revision : rangeKvs(response, 2)[0]?.create_revision;

/**
 * The lock protocol of etcd's own `concurrency.Mutex`, as core's queue driver: each contender writes a key under the
 * lock's directory, attached to its lease; the key with the lowest create revision holds the lock (its create
 * revision is the fencing token); every other contender watches only the key just before its own, so a release
 * wakes exactly one waiter, in FIFO order. Core's `acquireInQueue` runs the loop; this class is its atomic steps,
 * plus renew and release of the locks it granted.
 */
export class EtcdProtocol implements QueueDriver<Claim, Wait> {
  readonly #kv: KvClientLike;
  readonly #requests: EtcdRequests;
  readonly #session: EtcdSession;
  readonly #watch: EtcdReleaseWatch;
  readonly #cleanups: BackgroundRetries;
  readonly #prefix: string;
  readonly #undoTryMs: number;
  readonly #held = new Map<string, HeldLock>();
  readonly #slots = new Slots();
  readonly #serviceId = newServiceId();
  /** The newest store revision a response showed us, and when: a watch started soon after begins there. */
  #seen = { revision: 0n, at: Number.NEGATIVE_INFINITY };

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
    // One try to take a claim back is bounded like any request, not shorter: what makes the undo land in time is
    // that it leaves the moment core gives up (etcd applies it even if its answer is lost). A shorter bound only
    // adds timeouts during a leader election, and each timeout counts toward etcd3's per-host circuit breaker,
    // which then shuts the host for 5 s.
    this.#undoTryMs = parts.requests.timeoutMs;
  }

  /** `startedAt` is the call's start (the same after a restart): a claim's validity counts from there. */
  claim(request: AcquireRequest, { startedAt }: { readonly startedAt: number }): Claim {
    const directory = lockDirectory(this.#prefix, request.name);
    // The lowest slot of the name free in this service: keys are reused across acquisitions (see keys.ts).
    const slot = this.#slots.take(request.name);
    return {
      request,
      startedAt,
      deadline: startedAt + request.waitMs,
      directory,
      rangeEnd: prefixRangeEnd(directory),
      slot,
      key: contenderKey(directory, this.#serviceId, slot),
      lease: undefined,
      revision: 0n,
      writing: false,
      waiting: false,
      slotFreed: false,
      token: undefined,
      roundTripMs: 0,
    };
  }

  /**
   * Takes a lease (or joins the session), then writes our key in one transaction that also says who holds the lock
   * and who is just before us. A key of ours found already there is stale — left by an attempt whose delete failed
   * or whose answer was lost — and its create revision may be an old grant's fencing token: it is deleted and
   * written afresh, never adopted.
   */
  async enqueue(claim: Claim): Promise<Standing<Wait>> {
    const { request } = claim;
    const { lease, refresh } = await this.#session.forAcquire(request.ttlMs, claim.startedAt, request.signal);
    claim.lease = lease;
    let written: Written;
    try {
      written = await this.#write(claim, lease);
      if (written.stale) {
        await this.#deleteKey(claim.key, claim.revision, { signal: request.signal });
        claim.revision = 0n;
        written = await this.#write(claim, lease);
        if (written.stale) return GONE;
      }
    } catch (error) {
      // Not awaited: a refresh whose answer is lost must not hold up taking our key back.
      refresh?.catch(() => undefined);
      if (!isLeaseNotFound(error)) throw error;
      this.#session.markLost(lease);
      return GONE;
    }
    const refreshed = refresh ? await unlessAborted(refresh.catch(asError), request.signal) : undefined;
    // The write and the refresh beside it decide a free lock: together, one round trip.
    claim.roundTripMs = this.#requests.clock.monotonic() - written.sentAt;
    if (refreshed && !(refreshed instanceof Error) && !refreshed.alive) return GONE;
    if (!written.first) {
      if (written.predecessor === undefined) return this.#behind(claim, { pauseMs: 0 });
      return this.#behind(claim, { predecessor: written.predecessor, fromRevision: written.revision + 1n });
    }
    if (refreshed instanceof Error || lease.expiresAt - claim.startedAt < request.ttlMs) {
      throw transportError('session keep-alive', refreshed ?? new Error('session lease too close to expiry'));
    }
    return this.#first(claim, lease);
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
    const clock = this.#requests.clock;
    const lease = leaseOf(claim);
    const at = clock.monotonic();
    const fresh =
      lease.expiresAt - at >= lease.ttlMs / 2 && lease.expiresAt - claim.startedAt >= request.ttlMs;
    const keepAlive: Promise<KeepAliveOutcome | Error> = fresh
      ? Promise.resolve({ alive: true, sentAt: lease.confirmedAt })
      : this.#session.keepAlive(lease, at).catch(asError);
    const before = {
      ...byCreate(directory, rangeEnd, 'Descend', 1),
      max_create_revision: String(revision - 1n),
    };
    let response: TxnResponseLike;
    let confirmed: KeepAliveOutcome | Error;
    try {
      response = await this.#requests.run(
        'acquire',
        (options) =>
          this.#kv.txn(
            { success: [{ request_range: { key, keys_only: true } }, { request_range: before }] },
            options,
          ),
        { signal },
      );
      confirmed = await unlessAborted(keepAlive, signal);
    } catch (error) {
      if (signal.aborted || clock.monotonic() >= claim.deadline) throw error;
      return PAUSE;
    }
    this.#saw(response);
    // The re-read and the keep-alive beside it are what a grant after a wait rests on: one round trip.
    claim.roundTripMs = clock.monotonic() - at;
    const own = rangeKvs(response, 0)[0];
    const alive = confirmed instanceof Error ? undefined : confirmed.alive;
    if (own === undefined || BigInt(own.create_revision) !== revision || alive === false) return GONE;
    const predecessor = rangeKvs(response, 1)[0]?.key;
    if (predecessor) {
      return this.#behind(claim, { predecessor, fromRevision: BigInt(response.header.revision) + 1n });
    }
    if (confirmed instanceof Error) {
      // First in line, but the lease's remaining life is unconfirmed: ask again rather than guess.
      if (clock.monotonic() >= claim.deadline) throw confirmed;
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
  async wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<Standing<Wait> | undefined> {
    const lease = leaseOf(claim);
    const lost = lease.lost.signal;
    if (lost.aborted) return GONE;
    const wake = new WakeSignal();
    const notify = (): void => wake.notify();
    lost.addEventListener('abort', notify, { once: true });
    const unwatch =
      'predecessor' in wait
        ? this.#watch.watch(
            { key: wait.predecessor, startRevision: wait.fromRevision },
            { onDeletes: notify, onReset: notify },
          )
        : () => {};
    const poll = 'pauseMs' in wait ? wait.pauseMs : Math.max(POLL_FLOOR_MS, 2 * lease.ttlMs);
    try {
      await wake.wait(this.#requests.clock, Math.min(ms, poll), signal);
    } finally {
      unwatch();
      lost.removeEventListener('abort', notify);
    }
    // Core re-reads after a notice or a poll, and leaves without a re-read when the wait ran out at the deadline.
    return lost.aborted ? GONE : undefined;
  }

  /**
   * Takes our key out of the queue (giving the lock back if it was granted): revokes a lease of its own, which
   * deletes the key in the same raft entry, or deletes the key from the session, guarded by its create revision.
   * Each try is bounded by `requestTimeoutMs`; core retries in the background. With the revision unknown (the write's
   * answer is lost) the delete is unguarded and the slot is never reused by this service, so it can only hit that
   * write; while the write may still land, the try counts as failed, so that one more delete follows it.
   */
  async leave(claim: Claim): Promise<void> {
    this.#stopWaiting(claim);
    if (claim.token !== undefined) this.#forget(claim.token);
    const lease = claim.lease;
    if (!lease?.session) {
      try {
        if (lease) await this.#session.revoke(lease, this.#undoTryMs);
      } finally {
        // A key that survived a failed revoke is found stale and removed by the next contender in the slot.
        this.#freeSlot(claim);
      }
      return;
    }
    if (lease.isLost) {
      this.#freeSlot(claim);
      return;
    }
    const known = claim.revision > 0n;
    const writing = claim.writing;
    try {
      await this.#deleteKey(claim.key, known ? claim.revision : undefined, { timeoutMs: this.#undoTryMs });
    } finally {
      if (known) this.#freeSlot(claim);
    }
    if (!known && writing) throw new TransportError('etcd acquire: a write given up on may still land');
  }

  /** One keep-alive of the lock's lease, or a share of a recent one on a session (see `EtcdSession.renewal`). */
  async renew(request: RenewRequest): Promise<RenewResult> {
    const token = request.lease.ownershipToken;
    const held = this.#lookup(request.lease);
    if (!held) return { renewed: false };
    if (held.lease.isLost) {
      this.#drop(token, held);
      return { renewed: false };
    }
    const ttlMs = await this.#session.renewal(held.lease);
    if (ttlMs === undefined) {
      this.#drop(token, held);
      return { renewed: false };
    }
    if (this.#held.get(token) !== held) return { renewed: false };
    return { renewed: true, ttlMs };
  }

  /** A lease per lock is revoked (deleting its key); a session's key is deleted if its create revision matches. */
  async release(lease: Lease): Promise<boolean> {
    const held = this.#lookup(lease);
    if (!held) return false;
    this.#forget(lease.ownershipToken);
    try {
      if (!held.lease.session) return await this.#session.revoke(held.lease);
      try {
        const response = await this.#deleteKey(held.key, held.revision);
        return response.succeeded && response.responses[0]?.response_delete_range?.deleted !== '0';
      } catch (error) {
        // The session lease lives on with the other locks: without a retry this lock would stay taken with it.
        this.#cleanups.run(
          () => (held.lease.isLost ? Promise.resolve() : this.#deleteKey(held.key, held.revision)),
          this.#requests.clock.monotonic() + SESSION_CLEANUP_MS,
        );
        throw error;
      }
    } finally {
      // Only now, once the delete has settled: a new contender in this slot must not race our own delete. If the
      // key survived, whoever takes the slot next finds it stale and removes it.
      this.#slots.free(held.name, held.slot);
    }
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
    const held = this.#lookup(lease);
    if (!held) return false;
    if (held.lease.isLost) {
      this.#drop(token, held);
      return false;
    }
    const { key, revision } = held;
    const leaseId = held.lease.id;
    const response = await this.#requests.run('update metadata', (options) =>
      this.#kv.txn(
        {
          compare: [
            { key, target: 'Create', result: 'Equal', create_revision: String(revision) },
            { key, target: 'Lease', result: 'Equal', lease: leaseId },
          ],
          success: [{ request_put: { key, value: encodeValue(metadata, lease.ownerId), lease: leaseId } }],
        },
        options,
      ),
    );
    this.#saw(response);
    if (response.succeeded) return true;
    this.#drop(token, held);
    return false;
  }

  /** The locks of a lost session: forgotten, their slots free again (their keys went with the lease). */
  forgetLost(tokens: readonly string[]): void {
    for (const token of tokens) {
      const held = this.#held.get(token);
      if (!held) continue;
      this.#held.delete(token);
      this.#slots.free(held.name, held.slot);
    }
  }

  /** Forgets every held lock, returning the leases of their own that close() then revokes. */
  forgetAll(): TrackedLease[] {
    const own = new Set([...this.#held.values()].map((held) => held.lease).filter((lease) => !lease.session));
    this.#held.clear();
    return [...own];
  }

  /** The revision to start a watch of `name` from, if a response showed one within the last second. */
  recentRevision(): bigint | undefined {
    return this.#requests.clock.monotonic() - this.#seen.at < 1_000 ? this.#seen.revision + 1n : undefined;
  }

  /**
   * If the lock's directory is empty (the comparison over the whole range holds for no keys), the put alone makes
   * us the holder: the uncontended path is one put, as cheap as a bare put-if-absent. Otherwise the same
   * transaction reads our key as it was before the write, rewrites it, and reads the holder and the two newest keys
   * (the second newest is the one to watch, saving a request per waiter).
   */
  async #write(claim: Claim, lease: TrackedLease): Promise<Written> {
    const { key, directory, rangeEnd, request } = claim;
    const put: RequestOpLike = {
      request_put: { key, value: encodeValue(request.metadata, request.ownerId), lease: lease.id },
    };
    const settled = (): void => {
      claim.writing = false;
    };
    const sentAt = this.#requests.clock.monotonic();
    claim.writing = true;
    const response = await this.#requests.run(
      'acquire',
      (options) => {
        const sent = this.#kv.txn(
          {
            compare: [
              {
                key: directory,
                range_end: rangeEnd,
                target: 'Create',
                result: 'Equal',
                create_revision: '0',
              },
            ],
            success: [put],
            failure: [
              { request_range: { key, keys_only: true } },
              put,
              { request_range: { key, keys_only: true } },
              { request_range: byCreate(directory, rangeEnd, 'Ascend', 1) },
              { request_range: byCreate(directory, rangeEnd, 'Descend', 2) },
            ],
          },
          options,
        );
        sent.then(settled, settled);
        return sent;
      },
      {
        signal: request.signal,
        // Answered after we gave up: the key exists; core's clean-up (leave) deletes it, now by its revision.
        onLate: (late) => {
          const own = ownRevision(late);
          if (own !== undefined) claim.revision = BigInt(own);
        },
      },
    );
    this.#saw(response);
    const own = ownRevision(response);
    if (own === undefined) throw transportError('acquire', new Error('own key missing after write'));
    claim.revision = BigInt(own);
    const holder = response.succeeded ? undefined : rangeKvs(response, 3)[0];
    const newest = rangeKvs(response, 4);
    return {
      first:
        response.succeeded || (holder !== undefined && BigInt(holder.create_revision) === claim.revision),
      stale: !response.succeeded && rangeKvs(response, 0).length > 0,
      predecessor:
        newest[0] && BigInt(newest[0].create_revision) === claim.revision ? newest[1]?.key : undefined,
      revision: BigInt(response.header.revision),
      sentAt,
    };
  }

  /**
   * Deletes a key, guarded by its create revision when known. Unguarded only for a slot retired for good (see
   * leave): keys carry this service's random id, so no other service's key can be hit.
   */
  async #deleteKey(
    key: Buffer,
    revision: bigint | undefined,
    options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {},
  ): Promise<TxnResponseLike> {
    const response = await this.#requests.run(
      'release',
      (call) =>
        this.#kv.txn(
          {
            compare:
              revision === undefined
                ? []
                : [{ key, target: 'Create', result: 'Equal', create_revision: String(revision) }],
            success: [{ request_delete_range: { key } }],
          },
          call,
        ),
      options,
    );
    this.#saw(response);
    return response;
  }

  /** Queued: the lease is kept alive while the claim waits (nobody else renews a lease that holds no lock). */
  #behind(claim: Claim, wait: Wait): Standing<Wait> {
    if (!claim.waiting && claim.lease) {
      claim.waiting = true;
      this.#session.addWaiter(claim.lease);
    }
    return { kind: 'behind', wait };
  }

  #first(claim: Claim, lease: TrackedLease): Standing<Wait> {
    this.#stopWaiting(claim);
    if (lease.isLost) return GONE;
    const token = newOwnershipToken();
    claim.token = token;
    this.#held.set(token, {
      name: claim.request.name,
      slot: claim.slot,
      key: claim.key,
      revision: claim.revision,
      lease,
    });
    lease.grants.add(token);
    const grant: Grant = {
      ownershipToken: token,
      fencingToken: claim.revision,
      ...validity(lease, claim.startedAt),
      // The validity anchor stays at the lease's send (its TTL started there), often a round trip earlier.
      roundTripMs: claim.roundTripMs,
    };
    return { kind: 'first', grant };
  }

  #stopWaiting(claim: Claim): void {
    if (!claim.waiting || !claim.lease) return;
    claim.waiting = false;
    this.#session.removeWaiter(claim.lease);
  }

  #freeSlot(claim: Claim): void {
    if (claim.slotFreed) return;
    claim.slotFreed = true;
    this.#slots.free(claim.request.name, claim.slot);
  }

  #lookup(lease: Lease): HeldLock | undefined {
    const held = this.#held.get(lease.ownershipToken);
    if (!held || held.name !== lease.name || held.revision !== lease.fencingToken) return undefined;
    return held;
  }

  /** Drops a grant from the registry (no more renewals). Its slot is freed by whoever removes its key. */
  #forget(token: string): void {
    const held = this.#held.get(token);
    if (!held) return;
    this.#held.delete(token);
    held.lease.grants.delete(token);
  }

  /** A grant whose lease etcd no longer knows: its key is gone with the lease, so its slot is free again. */
  #drop(token: string, held: HeldLock): void {
    if (this.#held.get(token) !== held) return;
    this.#forget(token);
    this.#slots.free(held.name, held.slot);
  }

  #saw(response: TxnResponseLike): void {
    const revision = BigInt(response.header.revision);
    if (revision >= this.#seen.revision) this.#seen = { revision, at: this.#requests.clock.monotonic() };
  }
}

/**
 * How long a session's key that could not be deleted is retried: it would block its lock for as long as the session
 * lives (the other locks keep it alive), so for longer than any lease; tries stop once the session is lost.
 */
export const SESSION_CLEANUP_MS = 30_000;

/**
 * A grant's validity as core measures it: from the moment the lease's TTL last (re)started, which is the send
 * time of its last confirmed grant or keep-alive. After a wait in the queue that moment comes after the acquire
 * call began, and `queuedMs` tells core how much later. A session confirmed before this call began cannot be
 * expressed that way; then `ttlMs` is what is left of the lease, counted from the call's start (never less than
 * the TTL asked for: the session is refreshed beside the write otherwise).
 */
export function validity(lease: TrackedLease, startedAt: number): { ttlMs: number; queuedMs?: number } {
  const queuedMs = lease.confirmedAt - startedAt;
  if (queuedMs >= 0) return { ttlMs: lease.ttlMs, queuedMs };
  return { ttlMs: Math.floor(lease.expiresAt - startedAt) };
}

/** The lease of a claim core checks or waits on: enqueue set it before saying the claim was queued. */
export function leaseOf(claim: { readonly lease: TrackedLease | undefined }): TrackedLease {
  if (!claim.lease) throw new TransportError('etcd: a claim was checked before it was written');
  return claim.lease;
}

export function asError(value: unknown): Error {
  return value instanceof Error ? value : new TransportError(String(value));
}
