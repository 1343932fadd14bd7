import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  InvalidArgumentError,
  type Lease,
  type LockService,
  MAX_TIMER_MS,
  type RenewRequest,
  type RenewResult,
  TransportError,
  validateName,
} from '@dlock/core';
import type { RedisClientLike, RedisSubscriberLike } from './client-like.js';
import { Deadlines } from './deadlines.js';
import { DEFAULT_KEY_PREFIX, type LockKeys, lockKeys, validateKeyPrefix } from './keys.js';
import { Notifier } from './notifier.js';
import {
  checkClient,
  checkFenceRetentionMs,
  checkTimeoutMs,
  DEFAULT_FENCE_RETENTION_MS,
} from './option-checks.js';
import { type LockScripts, type LuaScript, lockScripts } from './scripts.js';
import { newOwnershipToken } from './tokens.js';
import { Waiter } from './waiter.js';

export interface RedisLockServiceOptions {
  /** A connected node-redis client (`createClient(...)` after `await connect()`). The caller owns and closes it. */
  readonly client: RedisClientLike;
  /**
   * A connection for pub/sub. Default: `client.duplicate()`, which the service connects, owns and closes in
   * {@link RedisLockService.close}. A subscriber you pass must be connected by you; the service only subscribes it.
   */
  readonly subscriber?: RedisSubscriberLike;
  /** Prefix of every key and channel, without `{` or `}`. Default `"dlock:"`. */
  readonly keyPrefix?: string;
  /**
   * Bound on each Redis call the service makes, in ms (node-redis does not time out a command already written).
   * A call that takes longer fails with a `TransportError`. Default 5000.
   */
  readonly commandTimeoutMs?: number;
  /**
   * How long a name's last fencing token is kept after its last grant, in ms. Default 7 days. Tokens are
   * max(last + 1, Redis server clock in µs), so once the record is gone (retention over, or Redis lost its data)
   * the next token still exceeds every earlier one unless the server clock stepped back by more than the time
   * since the name's last grant. Without a retention a key would stay for every name ever locked.
   */
  readonly fenceRetentionMs?: number;
}

const DEFAULT_TIMEOUT_MS = 5_000;
/** Renewals per script call: one call for a thousand locks, and no script long enough to stall the server. */
const RENEW_CHUNK = 1_000;
/** A waiter looks again this long after the holder's lease should have run out (expiry without a release). */
const EXPIRY_SLACK_MS = 2;
/** When the holder's expiry is unknown, a waiter looks again after this long. */
const UNKNOWN_EXPIRY_RECHECK_MS = 1_000;
const CLEANUP_RETRY_BASE_MS = 50;
const CLEANUP_RETRY_CAP_MS = 1_000;

/** Resolves after `ms`, or at once when `signal` aborts; never keeps the process alive. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms).unref();
    signal.addEventListener('abort', done, { once: true });
  });
}

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
  /** `performance.now()` at entry into `acquire`, and the end of the wait budget on the same clock. */
  readonly calledAt: number;
  readonly deadline: number;
}

/** A script reply with the time its request was sent (`performance.now()`). */
interface Attempt {
  readonly reply: ScriptReply;
  readonly sentAt: number;
}

const DECIMAL = /^[1-9]\d*$/;

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
  throw new TransportError(`${what}: unexpected reply from Redis: ${JSON.stringify(reply)}`);
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

function validateOptions(options: unknown): asserts options is RedisLockServiceOptions {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', 'must be an object with a connected node-redis `client`');
  }
  const o = options as Record<string, unknown>;
  const client = checkClient(o['client'], 'options.client', ['sendCommand']);
  const subscriber = o['subscriber'];
  if (subscriber !== undefined) {
    checkClient(subscriber, 'options.subscriber', ['subscribe']);
    if (subscriber === client) {
      throw new InvalidArgumentError(
        'options.subscriber',
        'must be a separate connection from options.client',
      );
    }
  } else if (typeof client['duplicate'] !== 'function') {
    throw new InvalidArgumentError('options.client', 'must have duplicate() when no subscriber is given');
  }
  if (o['keyPrefix'] !== undefined) validateKeyPrefix(o['keyPrefix']);
  if (o['commandTimeoutMs'] !== undefined)
    checkTimeoutMs(o['commandTimeoutMs'], 'options.commandTimeoutMs', false);
  if (o['fenceRetentionMs'] !== undefined) checkFenceRetentionMs(o['fenceRetentionMs']);
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
  readonly #deadlines = new Deadlines();
  readonly #notifier: Notifier;
  /** This service's wake-up channel: the release script publishes hand-offs for our waiters here. */
  readonly #channel: string;
  /** Queued acquires of this service by ownership token. */
  readonly #waiters = new Map<string, Waiter>();
  readonly #background = new Set<Promise<unknown>>();
  readonly #closing = new AbortController();
  #closed = false;
  readonly #send = (args: string[]): Promise<unknown> => {
    // Fail fast rather than sit in node-redis' offline queue and run after the caller gave up (node-redis #1039).
    if (this.#client.isReady === false) {
      return Promise.reject(new TransportError('the Redis client is not connected'));
    }
    return this.#client.sendCommand(args);
  };

  constructor(options: RedisLockServiceOptions) {
    validateOptions(options);
    this.#client = options.client;
    this.#prefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
    this.#timeoutMs = options.commandTimeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#scripts = lockScripts(options.fenceRetentionMs ?? DEFAULT_FENCE_RETENTION_MS);
    this.#channel = `${this.#prefix}wake:${randomBytes(12).toString('base64url')}`;
    this.#notifier = new Notifier({
      client: options.client,
      subscriber: options.subscriber,
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
    const calledAt = performance.now();
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
        return this.#queue({ name, keys, owner, ttlMs, signal: request.signal, calledAt, deadline });
      }
    }
    // Not queueing (no wait, or no subscriber to be woken through): one attempt, and core's loop waits.
    const { reply, sentAt } = await this.#attempt(keys, owner, ttlMs, 0);
    if (reply.granted) return this.#granted(owner, reply.fence, ttlMs, sentAt - calledAt);
    return reply.pttl > 0 ? { acquired: false, holderExpiresInMs: reply.pttl } : { acquired: false };
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    const [result] = await this.#renewChunk([request]);
    return result ?? { renewed: false };
  }

  /** One script call per 1,000 leases, all sent at once: one round trip however many locks are held. */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    if (requests.length <= RENEW_CHUNK) return this.#renewChunk(requests);
    const chunks: Promise<RenewResult[]>[] = [];
    for (let i = 0; i < requests.length; i += RENEW_CHUNK) {
      chunks.push(this.#renewChunk(requests.slice(i, i + RENEW_CHUNK)));
    }
    return (await Promise.all(chunks)).flat();
  }

  async release(lease: Lease): Promise<boolean> {
    const keys = lockKeys(this.#prefix, lease.name);
    return (await this.#run(this.#scripts.release, keys, [claimOf(lease)], 'release')) === 1;
  }

  /** Calls `onReleased` when `name` becomes free with nobody queued for it (a hand-off to a waiter is not "free"). */
  watch(name: string, onReleased: () => void): () => void {
    if (this.#closed) return () => {};
    return this.#notifier.watch(lockKeys(this.#prefix, validateName(name)).released, onReleased);
  }

  /**
   * Ends queued waits (they leave the queue), waits for cleanups in flight and closes the subscriber connection
   * if the service made it. Does not close `client`, which belongs to the caller. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    for (const waiter of this.#waiters.values()) waiter.deliver({ kind: 'closed' });
    // Let the waits reach their cleanup before waiting for it.
    await new Promise<void>((resolve) => setImmediate(resolve));
    await Promise.allSettled([...this.#background]);
    await this.#notifier.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#closed) throw new TransportError('the RedisLockService is closed');
  }

  /** `queuedMs`: from entry into `acquire` to a moment not after the server started this grant's lease. */
  #granted(owner: string, fence: bigint, ttlMs: number, queuedMs: number): AcquireResult {
    return {
      acquired: true,
      grant: { ownershipToken: owner, fencingToken: fence, ttlMs, queuedMs: Math.max(0, queuedMs) },
    };
  }

  /** One run of the acquire script. A failure leaves the outcome unknown, so the grant it may have made is undone. */
  async #attempt(keys: LockKeys, owner: string, ttlMs: number, waitMs: number): Promise<Attempt> {
    const args = [owner, String(ttlMs), String(waitMs)];
    if (waitMs > 0) args.push(this.#channel);
    const sentAt = performance.now();
    try {
      const reply = parseReply(await this.#run(this.#scripts.acquire, keys, args, 'acquire'), 'acquire');
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
    const waiter = new Waiter();
    this.#waiters.set(owner, waiter);
    // Send time of our last attempt that was refused: a hand-off that follows started its lease after it.
    let lastMiss = wait.calledAt;
    // Highest fence already handed to this waiter. A hand-off message can overtake or trail the script reply that
    // reports the same grant; once that grant is used up (its lease ran out before we could return it), a late copy
    // of it must not be taken for a new hand-off: the lock may belong to someone else by now.
    let spent = 0n;
    const look = (): Promise<Attempt> =>
      this.#attempt(keys, owner, ttlMs, Math.max(1, Math.ceil(deadline - performance.now())));
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
          const remaining = deadline - performance.now();
          if (remaining <= 0) return await this.#giveUp(wait, lastMiss);
          // Sleep until the holder's lease would run out: a holder that dies never releases, and nobody else will
          // tell us. A release reaches us sooner, as a hand-off.
          const pttl = attempt.reply.pttl;
          const expiry = pttl > 0 ? pttl + EXPIRY_SLACK_MS : UNKNOWN_EXPIRY_RECHECK_MS;
          const event = await waiter.wait(Math.min(expiry, remaining), signal);
          if (event.kind === 'aborted') {
            return this.#abandon(keys, owner, ttlMs, deadline, signal.reason);
          } else if (event.kind === 'closed' || this.#closed) {
            // A hand-off that races close() is given back too: nobody would renew it.
            const reason = new TransportError('the RedisLockService was closed');
            return this.#abandon(keys, owner, ttlMs, deadline, reason);
          } else if (event.kind === 'granted' && event.fence > spent) {
            leaseFrom = lastMiss;
            fence = event.fence;
          } else {
            if (deadline - performance.now() <= 0) return await this.#giveUp(wait, lastMiss);
            // Same ownership token: the script keeps our place in the queue, or finds the lock already ours.
            attempt = await look();
            continue;
          }
        }
        if (fence > spent) spent = fence;
        const granted = await this.#fresh(wait, fence, leaseFrom);
        if (granted) return granted;
        // The lease ran out before we could use it (a very long delay since the hand-off): queue again.
        if (deadline - performance.now() <= 0) return { acquired: false };
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
  async #fresh(wait: QueuedWait, fence: bigint, leaseFrom: number): Promise<AcquireResult | null> {
    const { name, keys, owner, ttlMs, calledAt } = wait;
    if (leaseFrom + ttlMs - performance.now() >= ttlMs / 3) {
      return this.#granted(owner, fence, ttlMs, leaseFrom - calledAt);
    }
    const lease: Lease = { name, ownerId: '', ownershipToken: owner, fencingToken: fence };
    const sentAt = performance.now();
    let renewed: boolean;
    try {
      renewed = (await this.renew({ lease, ttlMs })).renewed;
    } catch (error) {
      this.#leaveInBackground(keys, owner, ttlMs);
      throw error;
    }
    return renewed ? this.#granted(owner, fence, ttlMs, sentAt - calledAt) : null;
  }

  /** The wait budget is spent: leave the queue, but keep the lock if a hand-off reached us at the last moment. */
  async #giveUp(wait: QueuedWait, lastMiss: number): Promise<AcquireResult> {
    const { keys, owner, ttlMs } = wait;
    let attempt: Attempt;
    const sentAt = performance.now();
    try {
      attempt = { reply: parseReply(await this.#leave(keys, owner, true), 'leave'), sentAt };
    } catch (error) {
      this.#leaveInBackground(keys, owner, ttlMs);
      throw error;
    }
    if (!attempt.reply.granted) return { acquired: false };
    return (
      (await this.#fresh(wait, attempt.reply.fence, leaseStart(attempt, ttlMs, lastMiss))) ?? {
        acquired: false,
      }
    );
  }

  #abandon(keys: LockKeys, owner: string, ttlMs: number, deadline: number, reason: unknown): never {
    this.#leaveInBackground(keys, owner, ttlMs + Math.max(0, deadline - performance.now()));
    throw reason;
  }

  /**
   * The owner-checked cleanup after an abandoned or ambiguous acquire: removes our queue entry and, if the lock
   * was granted to us after all, frees it (handing it on). Retried with backoff while it still matters, i.e. for
   * `horizonMs` (the entry's remaining deadline plus the TTL), so that a dropped connection does not leave an
   * orphan grant for its whole TTL. Gives up earlier only when the service closes.
   */
  #leaveInBackground(keys: LockKeys, owner: string, horizonMs: number): void {
    const until = performance.now() + horizonMs;
    const run = async (): Promise<void> => {
      for (let attempt = 0; ; attempt++) {
        try {
          await this.#leave(keys, owner, false);
          return;
        } catch {
          const delay = Math.min(CLEANUP_RETRY_CAP_MS, CLEANUP_RETRY_BASE_MS * 2 ** attempt);
          if (this.#closed || performance.now() + delay >= until) return;
          await sleep(delay, this.#closing.signal);
        }
      }
    };
    const pending = run();
    this.#background.add(pending);
    void pending.finally(() => this.#background.delete(pending));
  }

  #leave(keys: LockKeys, owner: string, keep: boolean): Promise<unknown> {
    return this.#run(this.#scripts.leave, keys, [owner, keep ? '1' : '0'], 'leave queue');
  }

  #onGrant(message: string): void {
    const [owner, fence] = message.split(' ');
    if (owner === undefined || fence === undefined || !/^\d+$/.test(fence)) return;
    // No waiter: it left (abort, deadline) and its own leave script gives the lock back; nothing to do here.
    this.#waiters.get(owner)?.deliver({ kind: 'granted', fence: BigInt(fence) });
  }

  async #renewChunk(requests: readonly RenewRequest[]): Promise<RenewResult[]> {
    if (requests.length === 0) return [];
    const keys: string[] = [];
    const args: string[] = [];
    for (const { lease } of requests) {
      keys.push(lockKeys(this.#prefix, lease.name).lock);
      args.push(claimOf(lease));
    }
    for (const { ttlMs } of requests) args.push(String(Math.ceil(ttlMs)));
    const reply = await this.#deadlines.bound(
      this.#scripts.renew.run(this.#send, keys, args),
      this.#timeoutMs,
      `renew (${requests.length})`,
    );
    if (!Array.isArray(reply) || reply.length !== requests.length) {
      throw new TransportError(`renew: unexpected reply from Redis: ${JSON.stringify(reply)}`);
    }
    return reply.map((flag) => ({ renewed: flag === 1 }));
  }

  #run(script: LuaScript, keys: LockKeys, args: string[], what: string): Promise<unknown> {
    return this.#deadlines.bound(
      script.run(this.#send, [keys.lock, keys.fence, keys.queue, keys.waiters], args),
      this.#timeoutMs,
      what,
    );
  }
}
