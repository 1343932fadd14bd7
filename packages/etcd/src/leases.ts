import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { LeaseClientLike } from './client-like.js';
import { withDeadline } from './deadline.js';
import { EtcdServiceClosedError, isLeaseNotFound } from './errors.js';
import { KeepAliveChannel } from './keep-alive-channel.js';

export const now = (): number => performance.now();

export interface KeepAliveOutcome {
  /** False: etcd says the lease no longer exists. */
  readonly alive: boolean;
  /** When the keep-alive was sent: etcd restarted the TTL no earlier than this (monotonic ms). */
  readonly sentAt: number;
}

interface SentKeepAlive {
  readonly sentAt: number;
  readonly outcome: Promise<KeepAliveOutcome>;
  failed: boolean;
}

/** One etcd lease as this process knows it. All times are monotonic ms. */
export class TrackedLease {
  readonly id: string;
  /** True for a shared session lease, false for a lease of its own per lock. */
  readonly session: boolean;
  /** The TTL etcd granted, in seconds (it raises values below its minimum, 2 s by default). */
  ttlS: number;
  /** Send time of the last grant or keep-alive etcd confirmed: the lease lives at least until `expiresAt`. */
  confirmedAt: number;
  /** Ownership tokens of the locks held on this lease. */
  readonly grants = new Set<string>();
  /** Aborted once etcd says the lease is gone. */
  readonly lost = new AbortController();
  waiters = 0;
  timer: NodeJS.Timeout | undefined;
  last: SentKeepAlive | undefined;

  constructor(id: string, ttlS: number, confirmedAt: number, session: boolean) {
    this.id = id;
    this.ttlS = ttlS;
    this.confirmedAt = confirmedAt;
    this.session = session;
    // Every contender queued on a session listens for its loss: hundreds are normal, not a leak.
    setMaxListeners(0, this.lost.signal);
  }

  get ttlMs(): number {
    return this.ttlS * 1000;
  }

  /** The earliest moment etcd may expire the lease, as far as this process knows. */
  get expiresAt(): number {
    return this.confirmedAt + this.ttlMs;
  }

  get isLost(): boolean {
    return this.lost.signal.aborted;
  }
}

/**
 * Grants, keeps alive and revokes leases, each call one bounded round trip, and keeps the session leases of
 * session mode (one per distinct TTL).
 */
export class LeaseKeeper {
  readonly #client: LeaseClientLike;
  readonly #timeoutMs: number;
  readonly #channel: KeepAliveChannel;
  readonly #onSessionLost: (lease: TrackedLease, ownershipTokens: readonly string[]) => void;
  readonly #sessions = new Map<number, TrackedLease>();
  readonly #opening = new Map<number, Promise<TrackedLease>>();
  #closed = false;

  constructor(
    client: LeaseClientLike,
    timeoutMs: number,
    onSessionLost: (lease: TrackedLease, ownershipTokens: readonly string[]) => void,
  ) {
    this.#client = client;
    this.#timeoutMs = timeoutMs;
    this.#channel = new KeepAliveChannel(client, timeoutMs);
    this.#onSessionLost = onSessionLost;
  }

  /** With `signal`, settles as soon as it aborts; a lease granted after that is revoked when the answer comes. */
  async grant(ttlS: number, session: boolean, signal?: AbortSignal): Promise<TrackedLease> {
    const sentAt = now();
    const response = await withDeadline(
      'lease grant',
      this.#timeoutMs,
      (options) => this.#client.leaseGrant({ TTL: ttlS }, options),
      // Granted after we gave up: nobody will use or renew it, but revoking spares etcd the wait.
      (late) => {
        this.#client.leaseRevoke({ ID: late.ID }).catch(() => {});
      },
      signal,
    );
    if (this.#closed) {
      // Granted while close() ran: close has revoked what it knew of, so this one goes too, not after its TTL.
      await withDeadline('lease revoke', this.#timeoutMs, (options) =>
        this.#client.leaseRevoke({ ID: response.ID }, options),
      ).catch(() => {});
      throw new EtcdServiceClosedError();
    }
    const granted = Number(response.TTL);
    return new TrackedLease(String(response.ID), granted > 0 ? granted : ttlS, sentAt, session);
  }

  /**
   * One keep-alive round trip, or a share of one already sent no earlier than `notBefore`: a confirmation proves
   * the lease alive until its send time plus the TTL, which is all a later caller may rely on anyway.
   */
  keepAlive(lease: TrackedLease, notBefore: number): Promise<KeepAliveOutcome> {
    const last = lease.last;
    if (last && !last.failed && last.sentAt >= notBefore) return last.outcome;
    const sentAt = now();
    const outcome = this.#channel.keepAlive(lease.id).then((ttlS): KeepAliveOutcome => {
      if (ttlS <= 0) {
        this.markLost(lease);
        return { alive: false, sentAt };
      }
      lease.ttlS = ttlS;
      if (sentAt > lease.confirmedAt) lease.confirmedAt = sentAt;
      return { alive: true, sentAt };
    });
    const sent: SentKeepAlive = { sentAt, outcome, failed: false };
    outcome.catch(() => {
      sent.failed = true;
    });
    lease.last = sent;
    return outcome;
  }

  /**
   * Resolves true if the lease existed. Revoking deletes every key attached to it, in one raft entry. `timeoutMs`
   * bounds this one try (default: the request timeout).
   */
  async revoke(lease: TrackedLease, timeoutMs = this.#timeoutMs): Promise<boolean> {
    this.#forget(lease);
    try {
      await withDeadline('lease revoke', timeoutMs, (options) =>
        this.#client.leaseRevoke({ ID: lease.id }, options),
      );
      return true;
    } catch (error) {
      if (isLeaseNotFound(error)) return false;
      throw error;
    }
  }

  /**
   * A contender queued on `lease` keeps it alive (every third of the TTL) until it leaves the queue: nobody else
   * renews a lease that holds no lock yet.
   */
  addWaiter(lease: TrackedLease): void {
    lease.waiters += 1;
    if (lease.waiters > 1 || lease.isLost) return;
    lease.timer = setInterval(() => {
      this.keepAlive(lease, now()).catch(() => {});
    }, lease.ttlMs / 3);
    lease.timer.unref();
  }

  removeWaiter(lease: TrackedLease): void {
    lease.waiters -= 1;
    if (lease.waiters <= 0) {
      lease.waiters = 0;
      clearInterval(lease.timer);
      lease.timer = undefined;
    }
  }

  /** etcd said the lease is gone (or it ran out locally): waiters stop, and every lock on a session is lost. */
  markLost(lease: TrackedLease): void {
    if (lease.isLost) return;
    lease.lost.abort();
    this.#forget(lease);
    const tokens = [...lease.grants];
    lease.grants.clear();
    if (lease.session) this.#onSessionLost(lease, tokens);
  }

  /**
   * The live session lease for locks of TTL `ttlS`, granting one if there is none. A session whose known life
   * has run out is treated as lost: its locks are past their validity anyway, and it is revoked in case a leader
   * change extended it.
   */
  async session(ttlS: number): Promise<TrackedLease> {
    const current = this.#sessions.get(ttlS);
    if (current && !current.isLost) {
      if (current.expiresAt > now()) return current;
      this.markLost(current);
      // Awaited: its keys would otherwise sit ahead of the new session's in every queue until etcd expires them.
      await this.revoke(current).catch(() => false);
    }
    let opening = this.#opening.get(ttlS);
    if (!opening) {
      opening = this.grant(ttlS, true).then(
        (lease) => {
          this.#opening.delete(ttlS);
          this.#sessions.set(ttlS, lease);
          return lease;
        },
        (error: unknown) => {
          this.#opening.delete(ttlS);
          throw error;
        },
      );
      this.#opening.set(ttlS, opening);
    }
    return opening;
  }

  /** Revokes every session lease (bounded) and stops all timers and streams. */
  async close(): Promise<void> {
    this.#closed = true;
    // A session being opened right now lands in #sessions or fails; either way it is settled before revoking.
    await Promise.allSettled([...this.#opening.values()]);
    const sessions = [...this.#sessions.values()];
    await Promise.allSettled(sessions.map((lease) => this.revoke(lease)));
    for (const lease of sessions) this.markLost(lease);
    this.#channel.close();
  }

  #forget(lease: TrackedLease): void {
    clearInterval(lease.timer);
    lease.timer = undefined;
    for (const [ttlS, session] of this.#sessions) {
      if (session === lease) this.#sessions.delete(ttlS);
    }
  }
}
