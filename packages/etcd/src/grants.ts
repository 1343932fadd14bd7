import type { Grant, Lease, RenewRequest, RenewResult } from '@dlock/core';
import type { BackgroundRetries } from '@dlock/core/adapter';
import { transportError } from './errors.js';
import type { EtcdSession, KeepAliveOutcome, TrackedLease } from './etcd-session.js';
import { newOwnershipToken } from './keys.js';
import { deletedOne, type Txns } from './txns.js';

/** One grant this service holds (a lock's key, a permit's slot key): what a core `Lease` is checked against. */
export interface GrantRecord {
  readonly name: string;
  /** A permit's slot; undefined for a lock. A lease must name the same. */
  readonly slot?: number | undefined;
  readonly key: Buffer;
  /** The key's create revision: the fencing token. */
  readonly revision: bigint;
  readonly lease: TrackedLease;
}

/** What differs between the kinds of grant. */
export interface GrantKind<R extends GrantRecord> {
  /** The grant is no longer renewed or released by this service. */
  readonly forgotten?: (record: R) => void;
  /** The grant's key is gone (with its lease), or its delete has settled. */
  readonly freed?: (record: R) => void;
}

/**
 * How long a session's key that could not be deleted is retried: it would block its lock for as long as the session
 * lives (the other grants keep it alive), so for longer than any lease; tries stop once the session is lost.
 */
export const SESSION_CLEANUP_MS = 30_000;

/** The grants one driver made, by ownership token: what renew, release, a session's loss and close() look at. */
export class Grants<R extends GrantRecord> {
  readonly #records = new Map<string, R>();
  readonly #session: EtcdSession;
  readonly #txns: Txns;
  readonly #cleanups: BackgroundRetries;
  readonly #kind: GrantKind<R>;

  constructor(session: EtcdSession, txns: Txns, cleanups: BackgroundRetries, kind: GrantKind<R>) {
    this.#session = session;
    this.#txns = txns;
    this.#cleanups = cleanups;
    this.#kind = kind;
  }

  /** Records a grant on its lease and says what core is told; `claim.token` is set to its ownership token. */
  add(
    record: R,
    claim: { token: string | undefined; readonly startedAt: number; readonly roundTripMs: number },
  ): Grant {
    const token = newOwnershipToken();
    claim.token = token;
    this.#records.set(token, record);
    record.lease.grants.add(token);
    return {
      ownershipToken: token,
      fencingToken: record.revision,
      ...(record.slot === undefined ? {} : { slot: record.slot }),
      ...validity(record.lease, claim.startedAt),
      // The validity anchor stays at the lease's send (its TTL started there), often a round trip earlier.
      roundTripMs: claim.roundTripMs,
    };
  }

  /** The grant a lease names, if this service still holds it. */
  lookup(lease: Lease): R | undefined {
    const held = this.#records.get(lease.ownershipToken);
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

  /** The grant a lease names, unless its lease is known lost (then it is dropped). */
  live(lease: Lease): R | undefined {
    const held = this.lookup(lease);
    if (!held?.lease.isLost) return held;
    this.drop(lease.ownershipToken, held);
    return undefined;
  }

  /** Drops a grant from the registry (no more renewals). */
  forget(token: string): void {
    const held = this.#records.get(token);
    if (!held) return;
    this.#records.delete(token);
    held.lease.grants.delete(token);
    this.#kind.forgotten?.(held);
  }

  /** A grant whose lease etcd no longer knows: its key went with the lease. */
  drop(token: string, held: R): void {
    if (this.#records.get(token) !== held) return;
    this.forget(token);
    this.#kind.freed?.(held);
  }

  /** One keep-alive of the grant's lease, or a share of a recent one on a session (see `EtcdSession.renewal`). */
  async renew(request: RenewRequest): Promise<RenewResult> {
    const token = request.lease.ownershipToken;
    const held = this.live(request.lease);
    if (!held) return { renewed: false };
    const ttlMs = await this.#session.renewal(held.lease);
    if (ttlMs === undefined) {
      this.drop(token, held);
      return { renewed: false };
    }
    if (this.#records.get(token) !== held) return { renewed: false };
    return { renewed: true, ttlMs };
  }

  /**
   * A lease of its own is revoked (deleting the key in the same raft entry); a session's key is deleted if its
   * create revision is still the grant's token, and retried in the background if that fails: the session lives on
   * with the other grants, and without a retry the key would stay with it. "Not found" answered while the lease is
   * still within its known life is a release all the same (see `#deletedByUs`), on a session only if a keep-alive finds
   * the session alive (see `#sessionAlive`).
   */
  async release(lease: Lease): Promise<boolean> {
    const held = this.lookup(lease);
    if (!held) return false;
    this.forget(lease.ownershipToken);
    try {
      if (!held.lease.session) {
        return (await this.#session.revoke(held.lease)) || this.#deletedByUs(held.lease);
      }
      try {
        if (deletedOne(await this.#txns.deleteKey(held.key, held.revision))) return true;
        return this.#deletedByUs(held.lease) && (await this.#sessionAlive(held.lease));
      } catch (error) {
        this.#cleanups.run(
          () => (held.lease.isLost ? Promise.resolve() : this.#txns.deleteKey(held.key, held.revision)),
          this.#txns.requests.clock.monotonic() + SESSION_CLEANUP_MS,
        );
        throw error;
      }
    } finally {
      // Only now, once the delete has settled: a new claim on the same key must not race our own delete.
      this.#kind.freed?.(held);
    }
  }

  /**
   * Whether a key (or lease) found gone by a release was deleted by that release itself. It was, when the answer came
   * before the lease's known life ended: etcd cannot have expired the lease by then (its TTL restarted no earlier
   * than our last confirmed keep-alive was sent), and no other client deletes our keys, so the release was applied
   * once already and sent again (etcd3 re-sends a request after a connection reset, even one etcd applied). Past
   * that life, or with the lease known lost, the grant may have expired first: lost.
   */
  #deletedByUs(lease: TrackedLease): boolean {
    return !lease.isLost && this.#txns.requests.clock.monotonic() < lease.expiresAt;
  }

  /**
   * Whether a session whose key a release found gone still lives, asked with one keep-alive. A key of ours found
   * gone by our own delete sent again leaves the session alive; one that went with the session, revoked by someone
   * else (`etcdctl lease revoke`) or expired, does not: then the grant was lost before the release, and every other
   * grant on the session is reported lost with it. An unanswered keep-alive proves neither: the release stands.
   */
  async #sessionAlive(lease: TrackedLease): Promise<boolean> {
    try {
      return (await this.#session.keepAlive(lease, this.#txns.requests.clock.monotonic())).alive;
    } catch {
      return true;
    }
  }

  /** The grants of a lost session: forgotten (their keys went with the lease). */
  forgetLost(tokens: readonly string[]): void {
    for (const token of tokens) {
      const held = this.#records.get(token);
      if (held) this.drop(token, held);
    }
  }

  /**
   * Forgets every grant, returning their ownership tokens, which close() reports lost, and the leases of their own
   * that it then revokes.
   */
  forgetAll(): { readonly tokens: string[]; readonly ownLeases: TrackedLease[] } {
    const own = new Set(
      [...this.#records.values()].map((held) => held.lease).filter((lease) => !lease.session),
    );
    const tokens = [...this.#records.keys()];
    for (const token of tokens) this.forget(token);
    return { tokens, ownLeases: [...own] };
  }
}

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

/**
 * A grant straight from the enqueue write must promise the TTL asked for: on a session the refresh sent beside the
 * write must have landed, or the session must already live long enough.
 */
export function assertFullTtl(
  refreshed: KeepAliveOutcome | Error | undefined,
  lease: TrackedLease,
  claim: { readonly startedAt: number; readonly request: { readonly ttlMs: number } },
): void {
  if (refreshed instanceof Error || lease.expiresAt - claim.startedAt < claim.request.ttlMs) {
    throw transportError('session keep-alive', refreshed ?? new Error('session lease too close to expiry'));
  }
}
