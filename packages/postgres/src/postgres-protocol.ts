import { randomFillSync } from 'node:crypto';
import {
  type AcquireRequest,
  type Grant,
  type Lease,
  type LockInfo,
  type PermitHolder,
  type PermitRequest,
  type PermitsInfo,
  PermitsMismatchError,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import type { QueueDriver, Standing, WakeSignal } from '@dlock/core/adapter';
import { type Database, DEAD_CONNECTION_BOUNDS, type Row } from './database.js';
import { late, unexpectedRow } from './errors.js';
import type { PostgresReleaseWatch } from './postgres-release-watch.js';
import type { PostgresStatements } from './sql.js';

/** A waiter looks again this long after its holder's lease should have run out (an expiry without a release). */
const EXPIRY_SLACK_MS = 2;
/** While no notice can arrive (listener down or `listen: false`), waiters look again on this backoff. */
const FALLBACK_MIN_MS = 50;
const FALLBACK_MAX_MS = 1_000;
/** Bound on each try of a clean-up: while replies are being lost, the next try must not wait for a long bound. */
const CLEANUP_TRY_MS = 1_000;
/** Renewals per statement: one statement for a thousand leases, none large enough to stall the server. */
const RENEW_CHUNK = 1_000;
/**
 * Attempts of a caller that does not queue, when its statement saw a free slot but lost it to a concurrent one:
 * another slot may still be free, and without a place in the queue nobody would tell it.
 */
const RACE_RETRIES = 8;

/** Which rows a call works on: a lock (kind `l`, slot 0), or a semaphore's slots (kind `s`) under a limit. */
export type Target = { readonly kind: 'l' } | { readonly kind: 's'; readonly permits: number };

/** One acquire attempt's place in the queue: its id (the grant's ownership token), named before any I/O. */
export interface Claim {
  readonly request: AcquireRequest;
  readonly target: Target;
  readonly id: string;
  readonly startedAt: number;
  readonly queue: boolean;
  /** Where notices to this claim arrive (queued claims only). */
  readonly wake: WakeSignal | undefined;
  /** A statement that can grant or queue it has been sent: leaving must run the leave statement. */
  placed: boolean;
  /** Statements of this claim still running on the server side, including ones the caller gave up on. */
  inFlight: number;
  /** Called when `inFlight` drops to 0: a leave waiting for the statements it must undo. */
  onIdle: (() => void) | undefined;
  /** Round trip of the last statement that answered. */
  roundTripMs: number;
  /** The next look-again delay while no notice can arrive. */
  fallbackMs: number;
}

/** What a queued claim waits for: a notice, or this long (its holder's expiry, its own refresh, a backoff). */
export interface Wait {
  readonly recheckInMs: number;
}

const LOOK_AGAIN: Standing<Wait> = { kind: 'behind', wait: { recheckInMs: 0 } };

/**
 * Random bytes for claim ids, drawn 16 at a time from a buffer refilled every 256 ids: one `randomBytes` call per
 * claim was one of the larger costs of an uncontended acquire on the client.
 */
const ENTROPY = Buffer.alloc(16 * 256);
let entropyUsed = ENTROPY.length;

export function newOwnershipToken(): string {
  if (entropyUsed === ENTROPY.length) {
    randomFillSync(ENTROPY);
    entropyUsed = 0;
  }
  const token = ENTROPY.toString('base64url', entropyUsed, entropyUsed + 16);
  entropyUsed += 16;
  return token;
}

function integer(row: Row, column: string, what: string): number | undefined {
  const value = row[column];
  if (value === null || value === undefined) return undefined;
  const parsed = Number(value);
  if (!Number.isFinite(parsed)) throw unexpectedRow(what, row);
  return parsed;
}

function bigintOf(row: Row, column: string, what: string): bigint | undefined {
  const value = row[column];
  if (value === null || value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw unexpectedRow(what, row);
  return BigInt(value);
}

function onlyRow(rows: readonly Row[], what: string): Row {
  const row = rows[0];
  if (rows.length !== 1 || row === undefined) throw unexpectedRow(what, rows);
  return row;
}

/**
 * The queue protocol of locks and semaphores on PostgreSQL, as core's queue driver (`acquireInQueue` runs the loop),
 * plus renew, release, inspect and metadata updates. Every step is ONE statement (see `sql.ts`):
 * - enqueue and check: the acquire statement, which grants when the name is free and nobody live is ahead, else
 *   writes or refreshes the claim's waiter row (its place is its server-assigned sequence number);
 * - wait: this service's notice for the claim (a release or leave names the next waiter), or the holder's expiry,
 *   or the waiter row's refresh, whichever comes first; a backoff while no notice can arrive;
 * - leave: deletes the waiter row and any grant made to the claim, by its id, and wakes the next waiter.
 * There is no hand-over inside a release: the woken waiter takes the lock with its own statement, so a grant's
 * token is always minted by the statement that reports it, and a release never waits on the token row.
 */
export class PostgresProtocol implements QueueDriver<Claim, Wait> {
  readonly #db: Database;
  readonly #sql: PostgresStatements;
  readonly #watch: PostgresReleaseWatch;

  readonly #kind: 'l' | 's';

  /** `kind`: `l` drives lock requests, `s` permit requests (whose `permits` it reads). */
  constructor(db: Database, sql: PostgresStatements, watch: PostgresReleaseWatch, kind: 'l' | 's') {
    this.#db = db;
    this.#sql = sql;
    this.#watch = watch;
    this.#kind = kind;
  }

  /** How long a waiter row lives without a refresh: a crashed waiter blocks its queue no longer than this. */
  waiterLeaseMs(request: AcquireRequest): number {
    return Math.max(request.ttlMs, 2 * this.#db.timeoutMs, 1_000);
  }

  /** A new claim id; a queued claim's wake-up is registered now, before its first statement can queue it. */
  claim(request: AcquireRequest | PermitRequest, { startedAt }: { readonly startedAt: number }): Claim {
    const target: Target =
      this.#kind === 'l' ? { kind: 'l' } : { kind: 's', permits: (request as PermitRequest).permits };
    const id = newOwnershipToken();
    const queue = request.waitMs > 0;
    return {
      request,
      target,
      id,
      startedAt,
      queue,
      wake: queue && this.#db.canListen ? this.#watch.register(id) : undefined,
      placed: false,
      inFlight: 0,
      onIdle: undefined,
      roundTripMs: 0,
      fallbackMs: FALLBACK_MIN_MS,
    };
  }

  /**
   * The acquire statement: grants a free name, or places the claim in the queue (when it waits). A caller that does
   * not queue and lost a free slot to a concurrent statement tries again at once, a few times: several concurrent
   * `tryAcquire`s of a semaphore with slots free all see the same lowest free slot.
   */
  async enqueue(claim: Claim): Promise<Standing<Wait>> {
    let standing = await this.#acquire(claim);
    for (let i = 0; !claim.queue && standing === LOOK_AGAIN && i < RACE_RETRIES; i++) {
      standing = await this.#acquire(claim);
    }
    return standing;
  }

  /** The acquire statement again, with the same id: it keeps the claim's place and refreshes its row's expiry. */
  check(claim: Claim): Promise<Standing<Wait>> {
    return this.#acquire(claim);
  }

  async wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<Standing<Wait> | undefined> {
    const sleepMs = Math.min(ms, wait.recheckInMs);
    if (claim.wake) await claim.wake.wait(this.#db.clock, sleepMs, signal, this.#db.deadlines);
    else await this.#db.clock.sleep(sleepMs, signal);
    return undefined;
  }

  /**
   * The leave statement, by the claim's id: the owner-checked undo of an abandoned or failed attempt. A statement
   * of the claim that was given up on may still commit (its grant or its waiter row would land after this delete),
   * so the delete waits for it to settle first, at most as long as pg lets a written statement run. The wait is in
   * the try itself, not between retries: `close()` lets a running try finish but starts no new one, and a grant
   * landing after a closed service's only try would stay, held by nobody, for its whole TTL. Should the statement
   * still be running after that, the try counts as failed, so core's background retries run it again.
   */
  async leave(claim: Claim): Promise<void> {
    this.#watch.unregister(claim.id);
    if (!claim.placed) return;
    if (claim.inFlight > 0) await this.#settled(claim);
    const { kind } = claim.target;
    const rows = await this.#db.query('leave queue', this.#sql.leave, [kind, claim.request.name, claim.id], {
      timeoutMs: Math.min(this.#db.timeoutMs, CLEANUP_TRY_MS),
      // Owner-checked and wanted however late: after close() no retry follows a try that timed out in the queue.
      runsLate: true,
    });
    const gone = integer(onlyRow(rows, 'leave'), 'gone', 'leave') ?? 0;
    if (gone > 0 && kind === 'l') this.#watch.notify(claim.request.name);
    if (claim.inFlight > 0) {
      throw new TransportError('PostgreSQL acquire: a statement given up on may still commit');
    }
    claim.placed = false;
  }

  /** Resolves once the claim has no statement running, or after pg's own bound on one has passed. */
  async #settled(claim: Claim): Promise<void> {
    const timer = new AbortController();
    const idle = new Promise<void>((resolve) => {
      claim.onIdle = resolve;
    });
    try {
      await Promise.race([
        idle,
        this.#db.clock.sleep(DEAD_CONNECTION_BOUNDS * this.#db.timeoutMs, timer.signal, { unref: true }),
      ]);
    } finally {
      claim.onIdle = undefined;
      timer.abort();
    }
  }

  /** Renews each lease whose owner and token still hold its row, in one statement per thousand leases. */
  async renew(requests: readonly RenewRequest[]): Promise<RenewResult[]> {
    if (requests.length <= RENEW_CHUNK) return this.#renewChunk(requests);
    const chunks: Promise<RenewResult[]>[] = [];
    for (let i = 0; i < requests.length; i += RENEW_CHUNK) {
      chunks.push(this.#renewChunk(requests.slice(i, i + RENEW_CHUNK)));
    }
    return (await Promise.all(chunks)).flat();
  }

  /** The release statement: owner-checked delete, and one notice to the next waiter. */
  async release(lease: Lease): Promise<boolean> {
    const kind = lease.slot === undefined ? 'l' : 's';
    const rows = await this.#db.query('release', this.#sql.release, [
      kind,
      lease.name,
      lease.slot ?? 0,
      lease.ownershipToken,
      lease.fencingToken.toString(),
      this.#db.boundLeft(this.#db.clock.monotonic()),
    ]);
    const row = onlyRow(rows, 'release');
    if (row['late'] === 'true') throw late('release');
    const released = row['released'] === 'true';
    if (kind === 'l') this.#watch.notify(lease.name);
    return released;
  }

  async inspect(name: string): Promise<LockInfo> {
    const row = onlyRow(await this.#db.query('inspect', this.#sql.inspect, [name]), 'inspect');
    const waiters = integer(row, 'waiters', 'inspect') ?? 0;
    const token = bigintOf(row, 'token', 'inspect');
    if (token === undefined) return { held: false, waiters };
    const expiresInMs = integer(row, 'ms', 'inspect');
    const metadata = row['metadata'];
    // A lease row written before the owner_id column has none.
    const ownerId = row['owner_id'];
    return {
      held: true,
      ...(typeof ownerId === 'string' ? { ownerId } : {}),
      fencingToken: token,
      ...(metadata === null || metadata === undefined ? {} : { metadata }),
      ...(expiresInMs === undefined ? {} : { expiresInMs: Math.max(0, expiresInMs) }),
      waiters,
    };
  }

  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const rows = await this.#db.query('update metadata', this.#sql.updateMetadata, [
      lease.name,
      lease.ownershipToken,
      lease.fencingToken.toString(),
      metadata,
      this.#db.boundLeft(this.#db.clock.monotonic()),
    ]);
    const row = onlyRow(rows, 'update metadata');
    if (row['late'] === 'true') throw late('update metadata');
    const updated = row['updated'] === '1';
    if (updated) this.#watch.notify(lease.name);
    return updated;
  }

  /** Free slots of a semaphore now; `PermitsMismatchError` while it is in use under another limit. */
  async availablePermits(name: string, permits: number): Promise<number> {
    const row = onlyRow(
      await this.#db.query('available permits', this.#sql.availablePermits, [name, permits]),
      'available permits',
    );
    const stored = integer(row, 'stored', 'available permits');
    if (stored !== undefined) throw new PermitsMismatchError(name, permits, stored);
    const free = integer(row, 'free', 'available permits');
    if (free === undefined) throw unexpectedRow('available permits', row);
    return Math.max(0, free);
  }

  /** The semaphore's live holders by slot and its live waiters, in one statement (`PermitsMismatchError` as above). */
  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    const what = 'inspect permits';
    const rows = await this.#db.query(what, this.#sql.inspectPermits, [name, permits]);
    const first = rows[0];
    if (first === undefined) throw unexpectedRow(what, first);
    const stored = integer(first, 'stored', what);
    if (stored !== undefined) throw new PermitsMismatchError(name, permits, stored);
    const held: PermitHolder[] = [];
    for (const row of rows) {
      const slot = integer(row, 'slot', what);
      const token = bigintOf(row, 'token', what);
      if (slot === undefined || token === undefined) continue;
      const ownerId = typeof row['owner_id'] === 'string' ? row['owner_id'] : '';
      const expiresInMs = integer(row, 'ms', what);
      const metadata = row['metadata'];
      held.push({
        slot,
        ownerId,
        fencingToken: token,
        ...(expiresInMs === undefined ? {} : { expiresInMs: Math.max(0, expiresInMs) }),
        ...(typeof metadata === 'string' ? { metadata } : {}),
      });
    }
    return { permits, held, waiters: integer(first, 'waiters', what) ?? 0 };
  }

  async #acquire(claim: Claim): Promise<Standing<Wait>> {
    const { request, target } = claim;
    const { signal } = request;
    if (signal.aborted) throw signal.reason;
    const clock = this.#db.clock;
    const sentAt = clock.monotonic();
    // A waiter row need not outlive its wait: a crashed waiter with little wait left blocks the queue no longer.
    const waitLeft = claim.startedAt + request.waitMs - sentAt;
    const waiterLeaseMs = claim.queue
      ? Math.max(1, Math.min(this.waiterLeaseMs(request), Math.ceil(waitLeft) + this.#db.timeoutMs))
      : 0;
    const values: unknown[] = [
      request.name,
      claim.id,
      // Counted by core from `sentAt`: a wait for a pool connection comes off the lease (see `ttlLeft`).
      this.#db.ttlLeft(sentAt, request.ttlMs),
      request.metadata ?? null,
      waiterLeaseMs,
      claim.queue ? this.#watch.channel : null,
    ];
    if (target.kind === 's') values.push(target.permits);
    // The server's own bound on this statement: one that stalls there (a row lock, a paused backend) or on its way
    // there (no free connection in the pool) past the time this call waits for it writes nothing, so it cannot commit
    // a grant after the caller gave up and cleaned up.
    values.push(this.#db.boundLeft(sentAt));
    // Stored with the grant, for inspect.
    values.push(request.ownerId);
    const noticesBefore = this.#watch.notices(claim.id);
    // From here until it settles, the statement may grant or queue: leave must run, and wait for it.
    const placedBefore = claim.placed;
    claim.placed = true;
    claim.inFlight++;
    const rows = await this.#db.query(
      'acquire',
      target.kind === 'l' ? this.#sql.acquireLock : this.#sql.acquirePermit,
      values,
      {
        signal,
        onSettled: () => {
          if (--claim.inFlight === 0) claim.onIdle?.();
        },
      },
    );
    const answeredAt = clock.monotonic();
    claim.roundTripMs = answeredAt - sentAt;
    const row = onlyRow(rows, 'acquire');
    const token = bigintOf(row, 'token', 'acquire');
    if (token !== undefined) {
      // A wake-up that came while this statement ran may be for a slot it did not see freed: the next waiter
      // gets it instead of nobody. (A lock has one slot: it cannot have been freed twice.)
      if (target.kind === 's' && this.#watch.notices(claim.id) !== noticesBefore) {
        this.#watch.passOn(target.kind, request.name);
      }
      this.#watch.unregister(claim.id);
      if (target.kind === 'l') this.#watch.notify(request.name);
      const grant: Grant = {
        ownershipToken: claim.id,
        fencingToken: token,
        ttlMs: request.ttlMs,
        // The lease began on the server after this statement was sent.
        queuedMs: Math.max(0, sentAt - claim.startedAt),
        roundTripMs: claim.roundTripMs,
      };
      if (target.kind === 'l') return { kind: 'first', grant };
      const slot = integer(row, 'slot', 'acquire');
      if (slot === undefined) throw unexpectedRow('acquire', row);
      return { kind: 'first', grant: { ...grant, slot } };
    }
    if (target.kind === 's') {
      const stored = integer(row, 'stored', 'acquire');
      if (stored !== undefined) {
        // This statement wrote nothing, but an earlier one of the claim may have queued it: leave must still run.
        claim.placed = placedBefore;
        throw new PermitsMismatchError(request.name, target.permits, stored);
      }
    }
    // Refused without queueing: nothing of this claim is in the database.
    if (!claim.queue) claim.placed = false;
    if (row['again'] === 'true') return LOOK_AGAIN;
    const holderMs = integer(row, 'holder_ms', 'acquire');
    const ahead = integer(row, 'ahead', 'acquire') ?? 0;
    let recheckInMs = Number.POSITIVE_INFINITY;
    // First in line behind a holder: its lease running out frees the name without a release, and nobody would say.
    if (holderMs !== undefined && ahead === 0) recheckInMs = Math.max(0, holderMs) + EXPIRY_SLACK_MS;
    if (claim.queue) recheckInMs = Math.min(recheckInMs, waiterLeaseMs / 3);
    if (!this.#watch.listening) {
      recheckInMs = Math.min(recheckInMs, claim.fallbackMs * (0.5 + clock.random()));
      claim.fallbackMs = Math.min(FALLBACK_MAX_MS, claim.fallbackMs * 2);
    } else {
      claim.fallbackMs = FALLBACK_MIN_MS;
    }
    return {
      kind: 'behind',
      wait: { recheckInMs },
      // Only a fresh answer is a hint; a queued claim's would be as old as its wait by the time core passed it on.
      ...(!claim.queue && holderMs !== undefined && holderMs > 0 ? { holderExpiresInMs: holderMs } : {}),
    };
  }

  async #renewChunk(requests: readonly RenewRequest[]): Promise<RenewResult[]> {
    if (requests.length === 0) return [];
    const kinds: string[] = [];
    const names: string[] = [];
    const slots: number[] = [];
    const owners: string[] = [];
    const tokens: string[] = [];
    const ttls: number[] = [];
    for (const { lease, ttlMs } of requests) {
      kinds.push(lease.slot === undefined ? 'l' : 's');
      names.push(lease.name);
      slots.push(lease.slot ?? 0);
      owners.push(lease.ownershipToken);
      tokens.push(lease.fencingToken.toString());
      ttls.push(ttlMs);
    }
    const since = this.#db.clock.monotonic();
    const rows = await this.#db.query(`renew (${requests.length})`, this.#sql.renew, [
      kinds,
      names,
      slots,
      owners,
      tokens,
      // Core counts each renewed lease from before this call: a wait for a pool connection comes off (see `ttlLeft`).
      this.#db.atWrite(() => ttls.map((ttl) => ttl - (this.#db.clock.monotonic() - since))),
      this.#db.boundLeft(since),
    ]);
    const renewed = new Set<number>();
    for (const row of rows) {
      if (row['late'] === 'true') throw late('renew');
      const i = integer(row, 'i', 'renew');
      if (i === undefined || i < 1 || i > requests.length) throw unexpectedRow('renew', row);
      renewed.add(i);
    }
    return requests.map((_, index) => ({ renewed: renewed.has(index + 1) }));
  }
}
