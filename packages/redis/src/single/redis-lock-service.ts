import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  InvalidArgumentError,
  type Lease,
  type LockService,
  MAX_TIMER_MS,
  type RenewRequest,
  type RenewResult,
  TransportError,
  validateName,
} from '@dlock/core';
import { BackgroundRetries, linkSignals } from '@dlock/core/adapter';
import type { RedisClientLike } from '../client-like.js';
import { RedisServiceClosedError, unexpectedReply } from '../errors.js';
import { type LockKeys, lockKeys } from '../keys.js';
import type { LuaScript } from '../lua-script.js';
import { type RedisLockServiceOptions, resolveRedisOptions } from '../options.js';
import { newOwnershipToken } from '../tokens.js';
import { type CallState, Deadlines } from './deadlines.js';
import { RedisReleaseWatch } from './redis-release-watch.js';
import { type LockScripts, lockScripts } from './scripts.js';
import { Waiter } from './waiter.js';

export type { RedisLockServiceOptions } from '../options.js';

/** Renewals per script call: one call for a thousand locks, and no script long enough to stall the server. */
const RENEW_CHUNK = 1_000;
/** A waiter looks again this long after the holder's lease should have run out (expiry without a release). */
const EXPIRY_SLACK_MS = 2;
/** When the holder's expiry is unknown, a waiter looks again after this long. */
const UNKNOWN_EXPIRY_RECHECK_MS = 1_000;
/**
 * Bound on each try of a clean-up (when `commandTimeoutMs` is longer): while replies are being lost every try
 * times out, and the next one, which may be the one that gets through, must not wait for a long command bound.
 */
const CLEANUP_TRY_MS = 1_000;

type ScriptReply =
  /** `pttl` is set when the grant predates the script that reported it (a hand-off not yet heard of). */
  | { readonly granted: true; readonly fence: bigint; readonly pttl?: number }
  | { readonly granted: false; readonly pttl: number };

/** One queued acquire: what the wait loop needs about it. */
interface QueuedWait {
  readonly name: string;
  readonly keys: LockKeys;
  readonly owner: string;
  readonly ttlMs: number;
  readonly signal: AbortSignal;
  /** The clock's monotonic time at entry into `acquire`, and the end of the wait budget on the same clock. */
  readonly calledAt: number;
  readonly deadline: number;
}

/** A script reply with the time its request was sent (the clock's monotonic time). */
interface Attempt {
  readonly reply: ScriptReply;
  readonly sentAt: number;
}

const DECIMAL = /^[1-9]\d*$/;
/** A hand-off message: "<ownership token> <fencing token>". */
const HAND_OFF = /^(\S+) (\d+)$/;

/**
 * The acquire and leave scripts answer with the fencing token (a string) when they granted the lock to the caller,
 * with {fencing token, PTTL} when the caller already held it, and with the holder's PTTL otherwise.
 */
function parseReply(reply: unknown, what: string): ScriptReply {
  if (typeof reply === 'string' && DECIMAL.test(reply)) return { granted: true, fence: BigInt(reply) };
  if (typeof reply === 'number') return { granted: false, pttl: reply };
  if (Array.isArray(reply) && reply.length === 2) {
    const [fence, pttl] = reply as unknown[];
    if (typeof fence === 'string' && DECIMAL.test(fence) && typeof pttl === 'number') {
      return { granted: true, fence: BigInt(fence), pttl };
    }
  }
  throw unexpectedReply(what, reply);
}

/**
 * The latest moment, on this process' monotonic clock, that is surely not after the server started the grant's
 * lease. A grant made by the script itself started after the script was sent. One made earlier (by a release
 * handing over) started after `lastMiss`, the send of our last attempt that was still refused, and no earlier than
 * `sent + PTTL - TTL` as read by the script.
 */
function leaseStart(attempt: Attempt, ttlMs: number, lastMiss: number): number {
  const { reply, sentAt } = attempt;
  if (!reply.granted) return lastMiss;
  if (reply.pttl === undefined) return sentAt;
  return Math.max(lastMiss, sentAt + reply.pttl - ttlMs);
}

/** The lock key's value while a grant holds it: renew and release compare it whole. */
function claimOf(lease: Lease): string {
  return `${lease.ownershipToken} ${lease.fencingToken}`;
}

/**
 * A {@link LockService} on one Redis server (node-redis 5). Acquire, renew and release are each one Lua script;
 * fencing tokens are minted in the acquiring script and survive a Redis restart without persistence (see
 * `scripts.ts`); waiters queue in Redis in arrival order and a release hands the lock to the oldest live waiter
 * with one message to that waiter's process.
 *
 * @example
 * ```ts
 * const redis = await createClient({ url: 'redis://127.0.0.1:6379' }).connect();
 * const service = new RedisLockService({ client: redis });
 * const locks = new LockClient(service);
 * await locks.withLock('invoice:42', { ttlMs: 10_000, waitMs: 5_000 }, async (lock) => {
 *   await db.write(invoice, { fencingToken: lock.fencingToken });
 * });
 * await locks.close();
 * await service.close();
 * ```
 */
export class RedisLockService implements LockService {
  readonly #client: RedisClientLike;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #scripts: LockScripts;
  readonly #notifier: RedisReleaseWatch;
  /** This service's wake-up channel: the release script publishes hand-offs for our waiters here. */
  readonly #channel: string;
  /** Queued acquires of this service by ownership token. */
  readonly #waiters = new Map<string, Waiter>();
  readonly #clock: Clock;
  /** Owner-checked clean-ups after acquires whose outcome is unknown. */
  readonly #cleanups: BackgroundRetries;
  readonly #deadlines: Deadlines;
  /** Aborted by `close()`: ends queued waits (with a `TransportError`, as any interrupted call). */
  readonly #closing = new AbortController();
  /** Queued acquires in flight: `close()` lets each reach its clean-up before closing the clean-ups. */
  readonly #queued = new Set<Promise<AcquireResult>>();
  readonly #send = (args: string[]): Promise<unknown> => {
    // Fail fast rather than sit in node-redis' offline queue and run after the caller gave up (node-redis #1039).
    if (this.#client.isReady === false) {
      return Promise.reject(new TransportError('the Redis client is not connected'));
    }
    return this.#client.sendCommand(args);
  };

  constructor(options: RedisLockServiceOptions) {
    const resolved = resolveRedisOptions(options);
    this.#client = resolved.client;
    this.#prefix = resolved.keyPrefix;
    this.#timeoutMs = resolved.requestTimeoutMs;
    this.#clock = resolved.clock;
    this.#cleanups = new BackgroundRetries(this.#clock);
    this.#deadlines = new Deadlines(this.#clock);
    this.#scripts = lockScripts(resolved.fenceRetentionMs);
    this.#channel = `${this.#prefix}wake:${randomBytes(12).toString('base64url')}`;
    this.#notifier = new RedisReleaseWatch({
      client: resolved.client,
      subscriber: resolved.subscriber,
      clock: this.#clock,
      channel: this.#channel,
      deadlines: this.#deadlines,
      timeoutMs: this.#timeoutMs,
      onGrant: (message) => this.#onGrant(message),
      onReconnect: () => {
        for (const waiter of this.#waiters.values()) waiter.deliver({ kind: 'recheck' });
      },
    });
  }

  /**
   * Takes the lock, or queues for it when `waitMs > 0`: the call then resolves when a release hands the lock to
   * this waiter, when the holder's lease runs out, or after `waitMs` (not acquired). `waitMs: 0` never queues and
   * never overtakes a waiter that is queued.
   */
  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    const calledAt = this.#clock.monotonic();
    this.#assertOpen();
    const name = validateName(request.name, 'request.name');
    const { ttlMs } = request;
    if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TIMER_MS) {
      throw new InvalidArgumentError('request.ttlMs', `must be an integer from 1 to ${MAX_TIMER_MS}`);
    }
    const keys = lockKeys(this.#prefix, name);
    const owner = newOwnershipToken();
    const waitMs = Math.min(Math.max(0, Math.floor(request.waitMs)), MAX_TIMER_MS);
    if (waitMs >= 1) {
      const deadline = calledAt + waitMs;
      if (await this.#notifier.ready(Math.min(waitMs, this.#timeoutMs))) {
        this.#assertOpen();
        // close() ends the wait as the caller giving up would.
        const linked = linkSignals(request.signal, this.#closing.signal);
        const queued = this.#queue({ name, keys, owner, ttlMs, signal: linked.signal, calledAt, deadline });
        this.#queued.add(queued);
        try {
          return await queued;
        } finally {
          this.#queued.delete(queued);
          linked.dispose();
        }
      }
    }
    // Not queueing (no wait, or no subscriber to be woken through): one attempt, and core's loop waits. The signal
    // is read only if the script is slow: core makes it on first read, and a fast acquire should not pay for it.
    const { reply, sentAt } = await this.#attempt(keys, owner, ttlMs, 0, () => request.signal);
    if (reply.granted) return this.#granted(owner, reply.fence, ttlMs, sentAt - calledAt);
    return reply.pttl > 0 ? { acquired: false, holderExpiresInMs: reply.pttl } : { acquired: false };
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    const [result] = await this.#renewChunk([request]);
    return result ?? { renewed: false };
  }

  /** One script call per 1,000 leases, all sent at once: one round trip however many locks are held. */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    if (requests.length <= RENEW_CHUNK) return this.#renewChunk(requests);
    const chunks: Promise<RenewResult[]>[] = [];
    for (let i = 0; i < requests.length; i += RENEW_CHUNK) {
      chunks.push(this.#renewChunk(requests.slice(i, i + RENEW_CHUNK)));
    }
    return (await Promise.all(chunks)).flat();
  }

  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    const keys = lockKeys(this.#prefix, lease.name);
    return (await this.#run(this.#scripts.release, keys, [claimOf(lease)], 'release')) === 1;
  }

  /** Calls `onReleased` when `name` becomes free with nobody queued for it (a hand-off to a waiter is not "free"). */
  watch(name: string, onReleased: () => void): () => void {
    if (this.#closing.signal.aborted) return () => {};
    return this.#notifier.watch(lockKeys(this.#prefix, validateName(name)).released, onReleased);
  }

  /**
   * Ends queued waits (they leave the queue, and reject with a `TransportError`), waits for clean-ups in flight and
   * closes the subscriber connection if the service made it. Does not close `client`, which belongs to the caller.
   * Idempotent. Every call after it rejects with a `ClientClosedError` (code `CLIENT_CLOSED`).
   */
  async close(): Promise<void> {
    if (this.#closing.signal.aborted) return;
    this.#closing.abort(new TransportError('the RedisLockService was closed'));
    // Each wait ends at once; its clean-up has started by the time it has.
    await Promise.allSettled([...this.#queued]);
    await this.#cleanups.close();
    await this.#notifier.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#closing.signal.aborted) throw new RedisServiceClosedError('RedisLockService');
  }

  /** `queuedMs`: from entry into `acquire` to a moment not after the server started this grant's lease. */
  #granted(owner: string, fence: bigint, ttlMs: number, queuedMs: number): AcquireResult {
    return {
      acquired: true,
      grant: { ownershipToken: owner, fencingToken: fence, ttlMs, queuedMs: Math.max(0, queuedMs) },
    };
  }

  /**
   * One run of the acquire script. A failure leaves the outcome unknown, so the grant it may have made is undone;
   * so does the caller giving up (core aborts the signal when it abandons the call): the undo starts then, not at
   * this call's own, possibly much later, deadline.
   */
  async #attempt(
    keys: LockKeys,
    owner: string,
    ttlMs: number,
    waitMs: number,
    signal: () => AbortSignal,
  ): Promise<Attempt> {
    const args = [owner, String(ttlMs), String(waitMs)];
    if (waitMs > 0) args.push(this.#channel);
    const sentAt = this.#clock.monotonic();
    try {
      const reply = parseReply(
        await this.#run(this.#scripts.acquire, keys, args, 'acquire', signal),
        'acquire',
      );
      return { reply, sentAt };
    } catch (error) {
      // The grant (or queue entry) can matter for at most its TTL after the entry's deadline.
      this.#leaveInBackground(keys, owner, ttlMs + waitMs);
      throw error;
    }
  }

  async #queue(wait: QueuedWait): Promise<AcquireResult> {
    const { keys, owner, ttlMs, signal, deadline } = wait;
    // Registered before the script runs: the hand-off message may arrive before the script's own reply.
    const waiter = new Waiter(this.#clock);
    this.#waiters.set(owner, waiter);
    // Send time of our last attempt that was refused: a hand-off that follows started its lease after it.
    let lastMiss = wait.calledAt;
    // Highest fence already handed to this waiter. A hand-off message can overtake or trail the script reply that
    // reports the same grant; once that grant is used up (its lease ran out before we could return it), a late copy
    // of it must not be taken for a new hand-off: the lock may belong to someone else by now.
    let spent = 0n;
    const signalOf = (): AbortSignal => signal;
    const look = async (): Promise<Attempt> => {
      // Given up between two looks: nothing more is sent, and the entry we may have is removed.
      if (signal.aborted) this.#abandon(keys, owner, ttlMs, deadline, signal.reason);
      return this.#attempt(
        keys,
        owner,
        ttlMs,
        Math.max(1, Math.ceil(deadline - this.#clock.monotonic())),
        signalOf,
      );
    };
    try {
      let attempt = await look();
      for (;;) {
        let leaseFrom: number | undefined;
        let fence = 0n;
        if (attempt.reply.granted) {
          leaseFrom = leaseStart(attempt, ttlMs, lastMiss);
          fence = attempt.reply.fence;
        } else {
          lastMiss = attempt.sentAt;
          if (signal.aborted) return this.#abandon(keys, owner, ttlMs, deadline, signal.reason);
          const remaining = deadline - this.#clock.monotonic();
          if (remaining <= 0) return await this.#giveUp(wait, lastMiss);
          // Sleep until the holder's lease would run out: a holder that dies never releases, and nobody else will
          // tell us. A release reaches us sooner, as a hand-off.
          const pttl = attempt.reply.pttl;
          const expiry = pttl > 0 ? pttl + EXPIRY_SLACK_MS : UNKNOWN_EXPIRY_RECHECK_MS;
          const event = await waiter.wait(Math.min(expiry, remaining), signal);
          if (event.kind === 'aborted') {
            return this.#abandon(keys, owner, ttlMs, deadline, signal.reason);
          } else if (event.kind === 'granted' && event.fence > spent) {
            leaseFrom = lastMiss;
            fence = event.fence;
          } else {
            if (deadline - this.#clock.monotonic() <= 0) return await this.#giveUp(wait, lastMiss);
            // Same ownership token: the script keeps our place in the queue, or finds the lock already ours.
            attempt = await look();
            continue;
          }
        }
        if (fence > spent) spent = fence;
        const granted = await this.#fresh(wait, fence, leaseFrom, signalOf);
        if (granted) return granted;
        // The lease ran out before we could use it (a very long delay since the hand-off): queue again.
        if (deadline - this.#clock.monotonic() <= 0) return { acquired: false };
        attempt = await look();
      }
    } finally {
      this.#waiters.delete(owner);
    }
  }

  /**
   * A grant handed over while we waited started its lease at a moment we only bound from below (`leaseFrom`).
   * If a third of the lease may already be gone, it is extended first, so that the caller gets a handle with
   * a full window instead of one that core would find (nearly) expired. Resolves null if the lease ran out.
   */
  async #fresh(
    wait: QueuedWait,
    fence: bigint,
    leaseFrom: number,
    signal: () => AbortSignal,
  ): Promise<AcquireResult | null> {
    const { name, keys, owner, ttlMs, calledAt } = wait;
    if (leaseFrom + ttlMs - this.#clock.monotonic() >= ttlMs / 3) {
      return this.#granted(owner, fence, ttlMs, leaseFrom - calledAt);
    }
    const lease: Lease = { name, ownerId: '', ownershipToken: owner, fencingToken: fence };
    const sentAt = this.#clock.monotonic();
    let renewed: boolean;
    try {
      const [result] = await this.#renewChunk([{ lease, ttlMs }], signal);
      renewed = result?.renewed === true;
    } catch (error) {
      this.#leaveInBackground(keys, owner, ttlMs);
      throw error;
    }
    return renewed ? this.#granted(owner, fence, ttlMs, sentAt - calledAt) : null;
  }

  /** The wait budget is spent: leave the queue, but keep the lock if a hand-off reached us at the last moment. */
  async #giveUp(wait: QueuedWait, lastMiss: number): Promise<AcquireResult> {
    const { keys, owner, ttlMs, signal } = wait;
    const signalOf = (): AbortSignal => signal;
    let attempt: Attempt;
    const sentAt = this.#clock.monotonic();
    try {
      const reply = await this.#run(this.#scripts.leave, keys, [owner, '1'], 'leave queue', signalOf);
      attempt = { reply: parseReply(reply, 'leave'), sentAt };
    } catch (error) {
      this.#leaveInBackground(keys, owner, ttlMs);
      throw error;
    }
    if (!attempt.reply.granted) return { acquired: false };
    return (
      (await this.#fresh(wait, attempt.reply.fence, leaseStart(attempt, ttlMs, lastMiss), signalOf)) ?? {
        acquired: false,
      }
    );
  }

  #abandon(keys: LockKeys, owner: string, ttlMs: number, deadline: number, reason: unknown): never {
    this.#leaveInBackground(keys, owner, ttlMs + Math.max(0, deadline - this.#clock.monotonic()));
    throw reason;
  }

  /**
   * The owner-checked cleanup after an abandoned or ambiguous acquire: removes our queue entry and, if the lock
   * was granted to us after all, frees it (handing it on). Sent at once, then retried with jittered backoff while
   * it still matters, i.e. for `horizonMs` (the entry's remaining deadline plus the TTL), so that a dropped
   * connection does not leave an orphan grant for its whole TTL. Gives up earlier only when the service closes.
   * Each try sends the script whole and is bounded on its own (see {@link CLEANUP_TRY_MS}), so that neither an
   * empty script cache nor a lost reply keeps the undo from reaching the server.
   */
  #leaveInBackground(keys: LockKeys, owner: string, horizonMs: number): void {
    const args = [owner, '0'];
    const tryMs = Math.min(this.#timeoutMs, CLEANUP_TRY_MS);
    this.#cleanups.run(
      () =>
        this.#deadlines.bound(
          this.#scripts.leave.runWhole(this.#send, keyList(keys), args),
          tryMs,
          'leave queue (clean-up)',
        ),
      this.#clock.monotonic() + horizonMs,
    );
  }

  /** Runs inside the subscriber's message callback: whatever arrives, nothing may throw out of here. */
  #onGrant(message: unknown): void {
    // Anyone who can PUBLISH can write to the channel; only "<token> <decimal fence>" is a hand-off.
    if (typeof message !== 'string') return;
    const match = HAND_OFF.exec(message);
    if (match === null) return;
    const [, owner, fence] = match as unknown as [string, string, string];
    // No waiter: it left (abort, deadline) and its own leave script gives the lock back; nothing to do here.
    this.#waiters.get(owner)?.deliver({ kind: 'granted', fence: BigInt(fence) });
  }

  async #renewChunk(requests: readonly RenewRequest[], signal?: () => AbortSignal): Promise<RenewResult[]> {
    if (requests.length === 0) return [];
    const keys: string[] = [];
    const args: string[] = [];
    for (const { lease } of requests) {
      keys.push(lockKeys(this.#prefix, lease.name).lock);
      args.push(claimOf(lease));
    }
    for (const { ttlMs } of requests) args.push(String(Math.ceil(ttlMs)));
    const state: CallState = { abandoned: false };
    const reply = await this.#deadlines.bound(
      this.#scripts.renew.run(this.#send, keys, args, state),
      this.#timeoutMs,
      `renew (${requests.length})`,
      signal === undefined ? { state } : { state, signal },
    );
    if (!Array.isArray(reply) || reply.length !== requests.length) {
      throw unexpectedReply('renew', reply);
    }
    return reply.map((flag) => ({ renewed: flag === 1 }));
  }

  #run(
    script: LuaScript,
    keys: LockKeys,
    args: string[],
    what: string,
    signal?: () => AbortSignal,
  ): Promise<unknown> {
    const state: CallState = { abandoned: false };
    return this.#deadlines.bound(
      script.run(this.#send, keyList(keys), args, state),
      this.#timeoutMs,
      what,
      signal === undefined ? { state } : { state, signal },
    );
  }
}

/** The keys every lock script takes, in the order the scripts expect them. */
function keyList(keys: LockKeys): string[] {
  return [keys.lock, keys.fence, keys.queue, keys.waiters];
}
