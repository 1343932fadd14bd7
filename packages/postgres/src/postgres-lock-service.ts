import { setMaxListeners } from 'node:events';
import {
  type AcquireRequest,
  type AcquireResult,
  type Lease,
  type LockInfo,
  type LockService,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
  systemClock,
  validateName,
} from '@dlock/core';
import {
  acquireInQueue,
  BackgroundRetries,
  linkSignals,
  type QueueDriver,
  type QueueTools,
  validateMetadata,
  validateOwnerId,
  validatePermits,
} from '@dlock/core/adapter';
import { Database } from './database.js';
import { late, PostgresServiceClosedError } from './errors.js';
import { type PostgresLockServiceOptions, positiveInt, resolveOptions } from './options.js';
import { PostgresProtocol } from './postgres-protocol.js';
import { PostgresReleaseWatch } from './postgres-release-watch.js';
import { assertStorableText, type PostgresStatements, postgresStatements } from './sql.js';

/** Rows `sweep()` deletes per table and call, unless told otherwise. */
const SWEEP_LIMIT = 1_000;
/** How often `close()` looks whether the clean-ups it waits for have landed. */
const CLEANUP_POLL_MS = 20;

/**
 * A {@link LockService} on PostgreSQL: lease rows with an expiry by the server's clock, fencing tokens from a counter
 * table whose rows are never deleted, and a FIFO waiter table, run by core's one queue algorithm. Every operation is
 * one statement; nothing lives in a session, so it works on a pool behind PgBouncer in transaction mode.
 *
 * - Fencing token: the name's counter row + 1, written by the statement that grants, so it rises per name across
 *   grants, releases, expiries and restarts (a semaphore's per slot: row `(s, name, slot)`).
 * - TTL: exactly `ttlMs`, counted from when the granting (or renewing) statement reached the server.
 * - Queue: waiters in server-assigned sequence order; a release wakes only the next waiter, by a `pg_notify` to its
 *   service's channel sent in the release statement (see `PostgresReleaseWatch`); a waiter also looks again at the
 *   holder's expiry and, while its service cannot listen, on a backoff.
 * - Renewal: `renewMany` is one statement for every due lease (locks and permits alike).
 * - Elections: metadata stored in the lease row; `inspect`, `updateMetadata`, and `watchChanges` (notices from the
 *   statements that change the name, to the services observing it).
 * - Semaphores (`acquirePermit`): a slot row per held permit, the limit stored with holders and waiters.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const service = new PostgresLockService({ pool });
 * await service.ensureSchema();
 * const locks = new LockClient(service);
 * await using lock = await locks.acquire('invoice:42', { ttlMs: 10_000, waitMs: 5_000 });
 * ```
 */
export class PostgresLockService implements LockService {
  readonly #db: Database;
  readonly #sql: PostgresStatements;
  readonly #watch: PostgresReleaseWatch;
  readonly #locks: PostgresProtocol;
  readonly #permits: PostgresProtocol;
  readonly #cleanups: BackgroundRetries;
  readonly #queue: QueueTools;
  readonly #acquiring = new Set<Promise<AcquireResult>>();
  readonly #closing = new AbortController();
  #closed: Promise<void> | undefined;

  constructor(options: PostgresLockServiceOptions) {
    const resolved = resolveOptions(options);
    const clock = resolved.clock ?? systemClock;
    this.#db = new Database(
      resolved.pool,
      resolved.listen,
      clock,
      resolved.requestTimeoutMs,
      resolved.preparedStatements,
    );
    this.#sql = postgresStatements(resolved.tablePrefix, resolved.schema);
    const db = this.#db;
    const sql = this.#sql;
    const watch: PostgresReleaseWatch = new PostgresReleaseWatch(db, clock, {
      observe: async (names, ms, onSettled) => {
        const [row] = await db.query(
          'observe',
          sql.observe,
          [names, watch.channel, ms, db.boundLeft(clock.monotonic())],
          { onSettled },
        );
        if (row?.['late'] === 'true') throw late('observe');
      },
      unobserve: async (name, timeoutMs, onSettled) => {
        const [row] = await db.query(
          'unobserve',
          sql.unobserve,
          [name, watch.channel, db.boundLeft(clock.monotonic(), timeoutMs)],
          {
            ...(timeoutMs === undefined ? {} : { timeoutMs }),
            ...(onSettled === undefined ? {} : { onSettled }),
          },
        );
        if (row?.['late'] === 'true') throw late('unobserve');
      },
      // A wake-up still helps whoever waits, however late it gets its connection.
      passOn: (kind, name) => db.query('pass on a wake-up', sql.wakeHead, [kind, name], { runsLate: true }),
      selfNotify: (payload) =>
        db.query('listening check', 'SELECT pg_notify($1, $2)', [watch.channel, payload]),
    });
    this.#watch = watch;
    this.#locks = new PostgresProtocol(this.#db, this.#sql, this.#watch, 'l');
    this.#permits = new PostgresProtocol(this.#db, this.#sql, this.#watch, 's');
    this.#cleanups = new BackgroundRetries(clock);
    this.#queue = {
      clock,
      cleanups: this.#cleanups,
      // Past this, a leftover grant or waiter row has run out on its own.
      cleanupHorizonMs: (request) =>
        Math.max(request.ttlMs, this.#locks.waiterLeaseMs(request)) + resolved.requestTimeoutMs,
    };
    // Every pending acquire listens for close: hundreds are normal, not a leak.
    setMaxListeners(0, this.#closing.signal);
  }

  /** The SQL this service runs (DDL included), for migrations and audits. */
  get sql(): PostgresStatements {
    return this.#sql;
  }

  /** Statements this service has sent so far: one per acquire attempt, renewal batch, release, leave… */
  get statements(): number {
    return this.#db.statements;
  }

  /** The channel this service LISTENs on for its waiters' wake-ups. */
  get channel(): string {
    return this.#watch.channel;
  }

  /**
   * Creates the schema (if given) and the three tables and their index, if missing: one implicit transaction,
   * serialised across concurrent callers by a transaction-level advisory lock. Idempotent.
   */
  async ensureSchema(): Promise<void> {
    this.#assertOpen();
    await this.#db.script('ensure schema', this.#sql.createSchema);
  }

  /**
   * Deletes expired lease and waiter rows of names no statement touches any more (the statements that touch a name
   * clean up after it themselves), up to `limit` of each per call. For a maintenance job; never needed for
   * correctness. Token rows are never deleted.
   */
  async sweep(limit = SWEEP_LIMIT): Promise<{
    /** Lease rows deleted. */
    readonly leases: number;
    /** Waiter rows deleted. */
    readonly waiters: number;
  }> {
    this.#assertOpen();
    // A batch size, not a semaphore's limit: rows deleted per statement.
    positiveInt(limit, 'limit', 1_000_000);
    const [row] = await this.#db.query('sweep', this.#sql.sweep, [limit]);
    return { leases: Number(row?.['leases'] ?? 0), waiters: Number(row?.['waiters'] ?? 0) };
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    assertStorable(request);
    return this.#inQueue(this.#locks, request);
  }

  /**
   * A permit of the semaphore `request.name` (at most `request.permits` held at once): a free slot when no waiter is
   * ahead, else a place in its FIFO queue for up to `waitMs`. Rejects with `PermitsMismatchError` while holders or
   * waiters of the semaphore were admitted with another limit.
   */
  async acquirePermit(request: PermitRequest): Promise<AcquireResult> {
    this.#assertOpen();
    assertStorable(request);
    validatePermits(request.permits, 'request.permits');
    return this.#inQueue(this.#permits, request);
  }

  /** Free slots of the semaphore right now, in one statement (`PermitsMismatchError` as for `acquirePermit`). */
  async availablePermits(name: string, permits: number): Promise<number> {
    this.#assertOpen();
    storableName(name, 'name');
    validatePermits(permits, 'permits');
    return this.#locks.availablePermits(name, permits);
  }

  /**
   * The semaphore's live holders (slot rows: owner id, token, metadata, time left by the server's clock) and its
   * live waiters, in one statement (`PermitsMismatchError` as for `acquirePermit`).
   */
  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    this.#assertOpen();
    storableName(name, 'name');
    validatePermits(permits, 'permits');
    return this.#locks.inspectPermits(name, permits);
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    const [result] = await this.#locks.renew([request]);
    return result ?? { renewed: false };
  }

  /** One statement (`UPDATE … FROM unnest(…)`) for the whole batch, locks and permits alike. */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    return this.#locks.renew(requests);
  }

  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    return this.#locks.release(lease);
  }

  /**
   * Calls `onReleased` when `name` may have become free: at once for this service's own releases, and for other
   * processes' releases (and grants) through an observer row and a notice, while this service can listen.
   */
  watch(name: string, onReleased: () => void): () => void {
    storableName(name, 'name');
    if (this.#closing.signal.aborted) return () => {};
    return this.#watch.onName(name, onReleased);
  }

  /** The live holder of `name` (owner id, token, metadata, time left by the server's clock) and its live waiters. */
  async inspect(name: string): Promise<LockInfo> {
    this.#assertOpen();
    storableName(name, 'name');
    return this.#locks.inspect(name);
  }

  /** Owner-checked like a renewal; keeps the fencing token and the expiry. */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    this.#assertOpen();
    storableMetadata(metadata, 'metadata');
    return this.#locks.updateMetadata(lease, metadata);
  }

  /**
   * Calls `onChange` when `name` is granted, released or its metadata updated: by this service at once, by other
   * processes through a notice to this service's channel (an observer row of kind `o`, kept while subscribed), and
   * once when that row is in place. An expiry without a release sends nothing: core's election feed also looks
   * every half lease.
   */
  watchChanges(name: string, onChange: () => void): () => void {
    storableName(name, 'name');
    if (this.#closing.signal.aborted) return () => {};
    return this.#watch.onName(name, onChange);
  }

  /**
   * Ends pending acquires (what they queued is removed, once any statement of theirs still running has finished; a
   * removal that fails is retried), stops listening and deletes this service's observer rows. Settles within twice
   * `requestTimeoutMs` (plus timer slack), whatever the database does; what could not be removed by then is listed in
   * the README (Errors). Idempotent.
   * Does not end the pool, which the caller owns, and does not release held locks: their holders' `LockClient`s do
   * that, or the leases run out. Every call after close rejects with a `ClientClosedError` (code `CLIENT_CLOSED`).
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** `await using service = new PostgresLockService(...)`: the same as {@link close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #close(): Promise<void> {
    const { clock } = this.#db;
    // One deadline for everything close waits for: a clean-up try or a delete still running past it (a connection
    // that stopped answering) is left to its own statement bound and settles on its own.
    const deadline = clock.monotonic() + 2 * this.#db.timeoutMs;
    this.#closing.abort(new PostgresServiceClosedError());
    // Nothing waits or observes any more: the observer rows can go at once, beside the queue's clean-ups.
    const watching = this.#watch.close(deadline);
    // Each pending acquire ends at once; what it left in a queue is being removed once it has.
    await this.#within(deadline, Promise.allSettled([...this.#acquiring]));
    await this.#cleanupsLanded(deadline);
    await this.#within(deadline, Promise.allSettled([this.#cleanups.close(), watching]));
  }

  /**
   * Gives the clean-ups still running (the leave of each acquire close just ended, and earlier ones) until `deadline`
   * to land: closing the retries at once would leave a clean-up whose try failed (its connection killed, a failover)
   * undone, and its waiter row, or a grant nobody holds, would block the name for its whole lease. Twice a statement's
   * bound: the time a try may wait for a statement still running, then its own. Past it, a database that cannot be
   * reached leaves the rows to run out on their own, as a crashed process would.
   */
  async #cleanupsLanded(deadline: number): Promise<void> {
    const { clock } = this.#db;
    while (this.#cleanups.pending > 0 && clock.monotonic() < deadline) {
      // Not unref'd: close() is a call in flight, and the process waits for it like for any other.
      await clock.sleep(Math.min(CLEANUP_POLL_MS, Math.max(0, deadline - clock.monotonic())));
    }
  }

  /** `promise`, or nothing once `deadline` (the clock's monotonic time) has passed. */
  async #within(deadline: number, promise: Promise<unknown>): Promise<void> {
    const { clock } = this.#db;
    const left = deadline - clock.monotonic();
    if (left <= 0) return;
    const timer = new AbortController();
    await Promise.race([promise, clock.sleep(left, timer.signal).catch(() => {})]);
    timer.abort();
  }

  async #inQueue<C, W>(driver: QueueDriver<C, W>, request: AcquireRequest): Promise<AcquireResult> {
    // close() ends a pending acquire as the caller giving up would: core gives back whatever it won meanwhile.
    const signal = linkSignals(request.signal, this.#closing.signal);
    const acquiring = acquireInQueue(driver, { ...request, signal: signal.signal }, this.#queue);
    this.#acquiring.add(acquiring);
    try {
      return await acquiring;
    } finally {
      this.#acquiring.delete(acquiring);
      signal.dispose();
    }
  }

  #assertOpen(): void {
    if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
  }
}

/** The request's text fields, each stored in a `text` column (see `assertStorableText`). */
function assertStorable(request: AcquireRequest): void {
  storableName(request.name, 'request.name');
  storableOwnerId(request.ownerId, 'request.ownerId');
  if (request.metadata !== undefined) storableMetadata(request.metadata, 'request.metadata');
}

/**
 * A name as core checks it for a `LockClient` (callers may use the service directly), and one a `text` column can
 * hold. Sent, a lone surrogate became U+FFFD (another name's row), and a name past the index-row limit failed as if
 * the server were unreachable.
 */
function storableName(name: string, field: string): void {
  assertStorableText(validateName(name, field), field);
}

/**
 * An owner id as core checks it (`validateOwnerId`: 1 to 256 UTF-16 code units, well-formed, the rule `LockClient` and
 * every backend share), and one a `text` column can hold. Sent, a lone surrogate was stored as U+FFFD (inspect then
 * named an owner id nobody has, the same as another's), and a caller of the service could store one of any length.
 */
function storableOwnerId(ownerId: string, field: string): void {
  assertStorableText(validateOwnerId(ownerId, field), field);
}

/** Metadata as core checks it (at most 1,024 UTF-8 bytes, well-formed), and one a `text` column can hold. */
function storableMetadata(metadata: string, field: string): void {
  assertStorableText(validateMetadata(metadata, field), field);
}
