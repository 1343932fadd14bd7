import { setMaxListeners } from 'node:events';
import type { Clock } from '@dlock/core';
import { unlessAborted } from '@dlock/core/adapter';
import type { LeaseClientLike } from './client-like.js';
import { EtcdServiceClosedError, isLeaseNotFound } from './errors.js';
import { KeepAliveChannel } from './etcd-session-keepalive.js';
import { type EtcdRequests, later } from './requests.js';

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

/** One etcd lease as this process knows it. All times are monotonic ms on the service's clock. */
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
  /** Queued contenders on this lease; while there are any, a timer keeps it alive. */
  waiters = 0;
  stopTimer: (() => void) | undefined;
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

/** The lease an acquire attempt writes its key with, and in session mode a keep-alive sent beside the write. */
export interface AcquireLease {
  readonly lease: TrackedLease;
  readonly refresh?: Promise<KeepAliveOutcome>;
}

/**
 * This service's leases: in session mode the shared session leases (one per distinct TTL, as etcd's
 * `concurrency.Session`), otherwise a lease per lock. Grants, keeps alive and revokes them, each call one bounded
 * round trip, and reports a session etcd no longer knows, with every lock on it.
 */
export class EtcdSession {
  readonly #client: LeaseClientLike;
  readonly #requests: EtcdRequests;
  readonly #clock: Clock;
  /** Undefined: a lease per lock. Otherwise the minimum session TTL in ms (0: each acquire's own). */
  readonly #sessionTtlMs: number | undefined;
  readonly #channel: KeepAliveChannel;
  readonly #onSessionLost: (ownershipTokens: readonly string[]) => void;
  /** Live session leases by pool and TTL (`grants:10`, `waiters:10`). */
  readonly #sessions = new Map<string, TrackedLease>();
  readonly #opening = new Map<string, Promise<TrackedLease>>();
  readonly #lateRevokes = new Set<Promise<void>>();
  #closed = false;

  constructor(
    client: LeaseClientLike,
    requests: EtcdRequests,
    sessionTtlMs: number | undefined,
    onSessionLost: (ownershipTokens: readonly string[]) => void,
  ) {
    this.#client = client;
    this.#requests = requests;
    this.#clock = requests.clock;
    this.#sessionTtlMs = sessionTtlMs;
    this.#channel = new KeepAliveChannel(client, requests);
    this.#onSessionLost = onSessionLost;
  }

  /**
   * The lease an acquire attempt writes its key with. Per lock: a new lease. In session mode: the session, and —
   * when the session's known remaining life is shorter than the TTL asked for — a keep-alive sent alongside the
   * write, so the grant can still promise the full TTL. Settles as soon as `signal` aborts.
   */
  async forAcquire(ttlMs: number, startedAt: number, signal: AbortSignal): Promise<AcquireLease> {
    if (this.#sessionTtlMs === undefined) return { lease: await this.grant(seconds(ttlMs), false, signal) };
    // The session is shared: this caller giving up stops its wait, not the grant the others wait for too.
    const lease = await unlessAborted(this.session(seconds(Math.max(ttlMs, this.#sessionTtlMs))), signal);
    if (lease.expiresAt - startedAt >= ttlMs) return { lease };
    return { lease, refresh: this.keepAlive(lease, startedAt + ttlMs - lease.ttlMs) };
  }

  /** True in session mode (keys share session leases), false with a lease per lock. */
  get sessionMode(): boolean {
    return this.#sessionTtlMs !== undefined;
  }

  /** The TTL in seconds of the session lease for grants of `ttlMs` (session mode only). */
  sessionTtlS(ttlMs: number): number {
    return seconds(Math.max(ttlMs, this.#sessionTtlMs ?? 0));
  }

  /**
   * The waiters' session for `ttlS`, without I/O, if at least half its TTL is known to be left; else undefined. A
   * semaphore's waiters queue on a session lease of their own, so that keeping them alive never extends a holder's
   * lease (a permit taken with `renew: false` must run out even while others wait behind it). Nobody renews that
   * session while no one waits, so it can be close to its end: a key queued on it then would be gone, with its
   * place in the queue, before the first keep-alive of its wait (see `addWaiter`).
   */
  liveWaiters(ttlS: number): TrackedLease | undefined {
    const current = this.#sessions.get(`waiters:${ttlS}`);
    const now = this.#clock.monotonic();
    return current && !current.isLost && current.expiresAt - now >= current.ttlMs / 2 ? current : undefined;
  }

  /**
   * A waiters' session for `ttlS` with at least half its TTL known to be left: the current one, kept alive first when
   * it is shorter than that, or a new one when etcd no longer knows it.
   */
  async waiters(ttlS: number): Promise<TrackedLease> {
    const live = this.liveWaiters(ttlS);
    if (live) return live;
    const current = this.#sessions.get(`waiters:${ttlS}`);
    const now = this.#clock.monotonic();
    if (current && !current.isLost && current.expiresAt > now) {
      const outcome = await this.keepAlive(current, now);
      if (outcome.alive) return current;
    }
    return this.session(ttlS, 'waiters');
  }

  /** With `signal`, settles as soon as it aborts; a lease granted after that is revoked when the answer comes. */
  async grant(ttlS: number, session: boolean, signal?: AbortSignal): Promise<TrackedLease> {
    const sentAt = this.#clock.monotonic();
    const response = await this.#requests.run(
      'lease grant',
      (options) => this.#client.leaseGrant({ TTL: ttlS }, options),
      {
        signal,
        // Granted after we gave up: nobody will use or renew it, but revoking spares etcd the wait.
        onLate: (late) => {
          this.#revokeLate(late.ID);
        },
      },
    );
    if (this.#closed) {
      // Granted while close() ran: close has revoked what it knew of, so this one goes too, not after its TTL. Not
      // awaited here: close() waits for it only as long as its own bound allows.
      this.#revokeLate(response.ID);
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
    const sentAt = this.#clock.monotonic();
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
   * A renewal of a grant on `lease`: one keep-alive, or a share of a session keep-alive sent at most a sixth of the
   * TTL ago (which answers for every grant on the session: 1,000 locks cost one keep-alive per renewal interval).
   * Resolves with the TTL left counted from this call, so a grant's validity never extends past what the keep-alive
   * proved, or undefined when etcd no longer knows the lease.
   */
  async renewal(lease: TrackedLease): Promise<number | undefined> {
    const calledAt = this.#clock.monotonic();
    const notBefore = lease.session ? calledAt - lease.ttlMs / 6 : calledAt;
    const outcome = await this.keepAlive(lease, notBefore);
    return outcome.alive ? Math.floor(outcome.sentAt + lease.ttlMs - calledAt) : undefined;
  }

  /**
   * Resolves true if the lease existed. Revoking deletes every key attached to it, in one raft entry. `timeoutMs`
   * bounds this one try (default: the request timeout).
   */
  async revoke(lease: TrackedLease, timeoutMs?: number): Promise<boolean> {
    this.#forget(lease);
    try {
      await this.#requests.run(
        'lease revoke',
        (options) => this.#client.leaseRevoke({ ID: lease.id }, options),
        timeoutMs === undefined ? {} : { timeoutMs },
      );
      return true;
    } catch (error) {
      if (isLeaseNotFound(error)) return false;
      throw error;
    }
  }

  /**
   * A contender queued on `lease` keeps it alive (every third of the TTL) until it leaves the queue: nobody else
   * renews a lease that holds no lock yet. The first keep-alive goes sooner when the lease's known life is short (a
   * session last confirmed a while ago): at the latest a third of the TTL before that life ends.
   */
  addWaiter(lease: TrackedLease): void {
    lease.waiters += 1;
    if (lease.waiters > 1 || lease.isLost) return;
    const interval = lease.ttlMs / 3;
    const tick = (): void => {
      this.keepAlive(lease, this.#clock.monotonic()).catch(() => {});
      lease.stopTimer = later(this.#clock, interval, tick);
    };
    const left = lease.expiresAt - this.#clock.monotonic();
    lease.stopTimer = later(this.#clock, Math.max(0, Math.min(interval, left - interval)), tick);
  }

  removeWaiter(lease: TrackedLease): void {
    lease.waiters -= 1;
    if (lease.waiters <= 0) {
      lease.waiters = 0;
      this.#stopTimer(lease);
    }
  }

  /**
   * etcd refused a put for a lease it no longer knows, without saying which: a keep-alive of each asks (and marks
   * the lost one lost), so that a lost waiters' session never makes the grants' session look lost, or the reverse.
   */
  async findLost(leases: readonly (TrackedLease | undefined)[]): Promise<void> {
    const distinct = new Set(leases.filter((lease): lease is TrackedLease => lease !== undefined));
    const now = this.#clock.monotonic();
    await Promise.allSettled([...distinct].map((lease) => this.keepAlive(lease, now)));
  }

  /** etcd said the lease is gone (or it ran out locally): waiters stop, and every lock on a session is lost. */
  markLost(lease: TrackedLease): void {
    if (lease.isLost) return;
    lease.lost.abort();
    this.#forget(lease);
    const tokens = [...lease.grants];
    lease.grants.clear();
    if (lease.session) this.#onSessionLost(tokens);
  }

  /**
   * The live session lease of `pool` for grants of TTL `ttlS`, granting one if there is none. A session whose known life
   * has run out is treated as lost: its locks are past their validity anyway, and it is revoked in case a leader
   * change extended it.
   */
  async session(ttlS: number, pool: SessionPool = 'grants'): Promise<TrackedLease> {
    const id = `${pool}:${ttlS}`;
    const current = this.#sessions.get(id);
    if (current && !current.isLost) {
      if (current.expiresAt > this.#clock.monotonic()) return current;
      this.markLost(current);
      // Awaited: its keys would otherwise sit ahead of the new session's in every queue until etcd expires them.
      await this.revoke(current).catch(() => false);
    }
    let opening = this.#opening.get(id);
    if (!opening) {
      opening = this.grant(ttlS, true).then(
        (lease) => {
          this.#opening.delete(id);
          if (this.#closed) {
            // Granted just before close() began, handed over just after: close() never saw it.
            this.#revokeLate(lease.id);
            throw new EtcdServiceClosedError();
          }
          this.#sessions.set(id, lease);
          return lease;
        },
        (error: unknown) => {
          this.#opening.delete(id);
          throw error;
        },
      );
      this.#opening.set(id, opening);
    }
    return opening;
  }

  /**
   * Revokes every session lease and stops all timers and streams, within one request timeout whatever etcd does:
   * the sessions it knows are revoked at once, and a grant still in flight is revoked when its answer comes (see
   * `grant`), waited for only until that same deadline. A revoke still unanswered then goes on, bounded, without
   * keeping the process alive.
   */
  async close(): Promise<void> {
    this.#closed = true;
    const sessions = [...this.#sessions.values()];
    for (const lease of sessions) this.markLost(lease);
    const stop = new AbortController();
    const bound = this.#clock.sleep(this.#requests.timeoutMs, stop.signal, { unref: true }).catch(() => {});
    const work = Promise.allSettled([
      ...sessions.map((lease) => this.revoke(lease)),
      // A session opening now fails (closed) once its answer comes, after handing its lease to #revokeLate.
      ...[...this.#opening.values()].map((opening) => opening.catch(() => undefined)),
    ]).then(() => Promise.allSettled([...this.#lateRevokes]));
    try {
      await Promise.race([work, bound]);
    } finally {
      stop.abort();
      this.#channel.close();
    }
  }

  /** A lease granted after its caller gave up, or while close() ran: revoked, one bounded try, tracked for close(). */
  #revokeLate(id: string): void {
    const revoke = this.#requests
      .run('lease revoke', (options) => this.#client.leaseRevoke({ ID: id }, options))
      .then(
        () => undefined,
        () => undefined,
      );
    this.#lateRevokes.add(revoke);
    void revoke.then(() => this.#lateRevokes.delete(revoke));
  }

  #stopTimer(lease: TrackedLease): void {
    lease.stopTimer?.();
    lease.stopTimer = undefined;
  }

  #forget(lease: TrackedLease): void {
    this.#stopTimer(lease);
    for (const [id, session] of this.#sessions) {
      if (session === lease) this.#sessions.delete(id);
    }
  }
}

/** Which shared lease a session-mode key rides on: grants (locks, permits) or a semaphore's waiters. */
export type SessionPool = 'grants' | 'waiters';

/** etcd leases are whole seconds; round up so a lock never lives shorter than asked. */
export function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
