import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  InvalidArgumentError,
  type Lease,
  type LockInfo,
  type LockService,
  MAX_METADATA_BYTES,
  MAX_TIMER_MS,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
  TransportError,
  validateName,
} from '@dlock/core';
import {
  acquireInQueue,
  BackgroundRetries,
  linkSignals,
  type QueueTools,
  validateOwnerId,
  validatePermits,
} from '@dlock/core/adapter';
import { RedisServiceClosedError } from '../errors.js';
import { changeChannel, lockKeys, semaphoreWakeChannel, wakeChannel } from '../keys.js';
import { type RedisLockServiceOptions, resolveRedisOptions } from '../options.js';
import { type QueueKind, type QueueTarget, RedisAcquire } from './claims.js';
import { Deadlines } from './deadlines.js';
import { lockQueue } from './lock-queue.js';
import { RedisProtocol } from './redis-protocol.js';
import { RedisReleaseWatch } from './redis-release-watch.js';
import { lockScripts } from './scripts.js';
import { SemaphoreProtocol } from './semaphore-protocol.js';
import { semaphoreScripts } from './semaphore-scripts.js';

export type { RedisLockServiceOptions } from '../options.js';

/**
 * What a call that does not queue gives core's queue loop as its signal: the loop has nothing to wait for, and the
 * call bounds read the caller's own signal lazily (see `deadlines.ts`), so an acquire that answers at once never
 * makes core build the request's AbortController.
 */
const NOT_WAITING = new AbortController().signal;

/**
 * A {@link LockService} on one Redis server (node-redis 5 or 6). Acquire, renew and release are each one Lua script;
 * fencing tokens are minted in the acquiring script and survive a Redis restart without persistence (see
 * `scripts.ts`); waiters queue in Redis in arrival order and a release hands the lock to the oldest live waiter
 * with one message to that waiter's process. The protocol's steps are `RedisProtocol`; core's `acquireInQueue`
 * runs the queue loop.
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
export class RedisLockService implements LockService, AsyncDisposable {
  readonly #prefix: string;
  /** Names this service's wake channels. */
  readonly #serviceId: string;
  readonly #cluster: boolean;
  readonly #timeoutMs: number;
  readonly #clock: Clock;
  readonly #protocol: RedisProtocol;
  readonly #lockQueue: QueueKind;
  readonly #semaphores: SemaphoreProtocol;
  readonly #watch: RedisReleaseWatch;
  /** Owner-checked clean-ups after acquires whose outcome is unknown. */
  readonly #cleanups: BackgroundRetries;
  readonly #queue: QueueTools;
  /** Aborted by `close()`: ends queued waits (with a `TransportError`, as any interrupted call). */
  readonly #closing = new AbortController();
  /** `#closing.signal.aborted` as a field: every call checks it (AbortSignal's getter checks its receiver). */
  #isClosing = false;
  /** Queued acquires in flight: `close()` lets each reach its clean-up before closing the clean-ups. */
  readonly #queued = new Set<Promise<AcquireResult>>();

  constructor(options: RedisLockServiceOptions) {
    const resolved = resolveRedisOptions(options);
    this.#prefix = resolved.keyPrefix;
    this.#timeoutMs = resolved.requestTimeoutMs;
    this.#clock = resolved.clock;
    this.#cleanups = new BackgroundRetries(this.#clock);
    const deadlines = new Deadlines(this.#clock);
    // This service's wake-up channel: the release script publishes hand-offs for our waiters there.
    this.#serviceId = randomBytes(12).toString('base64url');
    this.#cluster = resolved.client.cluster;
    const channel = `${this.#prefix}wake:${this.#serviceId}`;
    this.#watch = new RedisReleaseWatch({
      client: resolved.client,
      subscriber: resolved.subscriber,
      channel,
      deadlines,
      clock: this.#clock,
      timeoutMs: this.#timeoutMs,
    });
    const scripts = lockScripts(resolved.fenceRetentionMs, this.#cluster);
    this.#protocol = new RedisProtocol({
      client: resolved.client,
      scripts,
      deadlines,
      clock: this.#clock,
      requestTimeoutMs: this.#timeoutMs,
      keyPrefix: this.#prefix,
      channel,
      watch: this.#watch,
    });
    this.#lockQueue = lockQueue(scripts);
    this.#semaphores = new SemaphoreProtocol({
      scripts: semaphoreScripts(resolved.fenceRetentionMs, this.#cluster),
      send: this.#protocol.send,
      deadlines,
      requestTimeoutMs: this.#timeoutMs,
      keyPrefix: this.#prefix,
    });
    this.#queue = {
      clock: this.#clock,
      cleanups: this.#cleanups,
      // A leftover queue entry matters until its deadline, a leftover grant until its TTL runs out.
      cleanupHorizonMs: (request) => request.ttlMs + request.waitMs,
    };
  }

  /**
   * Takes the lock, or queues for it when `waitMs > 0`: the call then resolves when a release hands the lock to
   * this waiter, when the holder's lease runs out, or after `waitMs` (not acquired). `waitMs: 0` never queues and
   * never overtakes a waiter that is queued.
   */
  acquire(request: AcquireRequest): Promise<AcquireResult> {
    // Not `async`: a call that does not queue hands core the queue loop's own promise (an async function returning
    // a promise costs two more turns of the microtask queue). Bad input still rejects, never throws.
    try {
      const calledAt = this.#clock.monotonic();
      const name = this.#checkRequest(request);
      const keys = this.#protocol.keysOf(name);
      const target: QueueTarget =
        request.metadata === undefined
          ? { kind: this.#lockQueue, keys }
          : { kind: this.#lockQueue, keys, stored: checkMetadata(request.metadata, 'request.metadata') };
      return this.#start(request, name, target, calledAt);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Takes a free permit (slot) of the semaphore `request.name`, or queues for one when `waitMs > 0`, as `acquire`
   * does for a lock: a release hands its slot to the oldest waiter, a lease that runs out is noticed by the head
   * waiter, and `waitMs: 0` never queues and never overtakes a waiter. Rejects with `PermitsMismatchError` while the
   * semaphore is in use with another `permits`. Its keys live apart from any lock of the same name.
   */
  acquirePermit(request: PermitRequest): Promise<AcquireResult> {
    try {
      const calledAt = this.#clock.monotonic();
      const name = this.#checkRequest(request);
      const metadata =
        request.metadata === undefined ? undefined : checkMetadata(request.metadata, 'request.metadata');
      const target = this.#semaphores.target(
        name,
        validatePermits(request.permits, 'request.permits'),
        metadata,
      );
      // Nothing stores a permit's metadata (no call reads it back), but it is checked as everywhere else.
      if (request.metadata !== undefined) checkMetadata(request.metadata, 'request.metadata');
      return this.#start(request, name, target, calledAt);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** How many of the semaphore's `permits` slots no live lease holds, read from Redis (one script). */
  async availablePermits(name: string, permits: number): Promise<number> {
    this.#assertOpen();
    return this.#semaphores.available(validateName(name), validatePermits(permits, 'permits'));
  }

  /**
   * The semaphore's live leases by slot (owner id, token, time left by the server's clock, metadata, read from the
   * slot keys) and its queued callers whose deadline has not passed; one script.
   */
  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    this.#assertOpen();
    return this.#semaphores.inspect(validateName(name), validatePermits(permits, 'permits'));
  }

  /** The name, once the service is open and the request's name, owner id and TTL are valid (before any I/O). */
  #checkRequest(request: AcquireRequest): string {
    this.#assertOpen();
    const name = validateName(request.name, 'request.name');
    validateOwnerId(request.ownerId, 'request.ownerId');
    const { ttlMs } = request;
    if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TIMER_MS) {
      throw new InvalidArgumentError('request.ttlMs', `must be an integer from 1 to ${MAX_TIMER_MS}`);
    }
    return name;
  }

  #start(
    request: AcquireRequest,
    name: string,
    target: QueueTarget,
    calledAt: number,
  ): Promise<AcquireResult> {
    const waitMs = Math.min(Math.max(0, Math.floor(request.waitMs)), MAX_TIMER_MS);
    if (waitMs >= 1) return this.#acquireQueued(request, name, target, calledAt, waitMs);
    return this.#attempt(request, name, target, calledAt);
  }

  /** Queues in Redis when a subscriber can wake this waiter; otherwise one attempt, and core's loop waits. */
  async #acquireQueued(
    request: AcquireRequest,
    name: string,
    target: QueueTarget,
    calledAt: number,
    waitMs: number,
  ): Promise<AcquireResult> {
    const { ownerId, ttlMs } = request;
    const wake = !this.#cluster
      ? undefined
      : target.permits === undefined
        ? wakeChannel(this.#prefix, name, this.#serviceId)
        : semaphoreWakeChannel(this.#prefix, name, this.#serviceId);
    const listening = (timeoutMs: number): Promise<boolean> =>
      wake === undefined ? this.#watch.ready(timeoutMs) : this.#watch.join(wake, timeoutMs);
    if (await listening(Math.min(waitMs, this.#timeoutMs))) {
      try {
        this.#assertOpen();
        const left = Math.floor(calledAt + waitMs - this.#clock.monotonic());
        if (left >= 1) {
          // close() ends the wait as the caller giving up would.
          const linked = linkSignals(request.signal, this.#closing.signal);
          const signal = linked.signal;
          const queued = acquireInQueue(
            this.#protocol,
            new RedisAcquire(name, ownerId, ttlMs, target, calledAt, left, signal, () => signal, wake),
            this.#queue,
          );
          this.#queued.add(queued);
          try {
            return await queued;
          } finally {
            this.#queued.delete(queued);
            linked.dispose();
          }
        }
      } finally {
        if (wake !== undefined) this.#watch.part(wake);
      }
    }
    return this.#attempt(request, name, target, calledAt);
  }

  /**
   * One attempt that does not queue (no wait, or no subscriber to be woken through); core's loop waits. The signal
   * is read only if the script is slow: core makes it on first read, and a fast acquire should not pay for it.
   */
  #attempt(
    request: AcquireRequest,
    name: string,
    target: QueueTarget,
    calledAt: number,
  ): Promise<AcquireResult> {
    return acquireInQueue(
      this.#protocol,
      new RedisAcquire(
        name,
        request.ownerId,
        request.ttlMs,
        target,
        calledAt,
        0,
        NOT_WAITING,
        () => request.signal,
      ),
      this.#queue,
    );
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    const [result] = await this.#protocol.renew([request]);
    return result ?? { renewed: false };
  }

  /** One script call per 1,000 leases, all sent at once: one round trip however many locks are held. */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    return this.#protocol.renew(requests);
  }

  /** Releases a lock, or a permit (a lease with `slot`): its slot goes to the oldest waiter, or is free. */
  release(lease: Lease): Promise<boolean> {
    // Not `async`, for the same reason as `acquire`.
    try {
      this.#assertOpen();
      const { slot } = lease;
      if (slot !== undefined) return this.#semaphores.release({ ...lease, slot });
      return this.#protocol.release(lease);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Calls `onReleased` when `name` becomes free with nobody queued for it (a hand-off to a waiter is not "free"). */
  watch(name: string, onReleased: () => void): () => void {
    if (this.#closing.signal.aborted) return () => {};
    const valid = validateName(name);
    return this.#watch.watch(lockKeys(this.#prefix, valid).released, onReleased, () =>
      this.#protocol.markWatched(valid),
    );
  }

  /**
   * The holder of `name` as the server sees it now (one script: the lock key, its TTL, the queue's length), with
   * the metadata stored with its grant. A tombstone or a missing key is not held; a lease that ran out is missing.
   */
  async inspect(name: string): Promise<LockInfo> {
    this.#assertOpen();
    return this.#protocol.inspect(validateName(name));
  }

  /**
   * Replaces the metadata of `lease`'s grant if it still holds the lock (owner-checked on the server, like a
   * renewal), keeping its fencing token and expiry. False when it no longer holds.
   */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    this.#assertOpen();
    return this.#protocol.updateMetadata(lease, checkMetadata(metadata, 'metadata'));
  }

  /**
   * Calls `onChange` when the holder of `name` or its metadata may have changed: a grant, a hand-off, a release, a
   * metadata update (expiry is seen only by the next grant). One subscription per name and service, shared by
   * every caller; `onChange` is called once when it becomes active.
   */
  watchChanges(name: string, onChange: () => void): () => void {
    if (this.#closing.signal.aborted) return () => {};
    const valid = validateName(name);
    return this.#watch.watch(
      changeChannel(this.#prefix, valid),
      onChange,
      () => this.#protocol.markWatched(valid, 'o'),
      true,
    );
  }

  /**
   * Ends queued waits (they leave the queue, and reject with a `TransportError`), waits for clean-ups in flight and
   * closes the subscriber connection if the service made it. Does not close `client`, which belongs to the caller.
   * Idempotent. Every call after it rejects with a `ClientClosedError` (code `CLIENT_CLOSED`).
   */
  async close(): Promise<void> {
    if (this.#isClosing) return;
    this.#isClosing = true;
    this.#closing.abort(new TransportError('the RedisLockService was closed'));
    // Each wait ends at once; its clean-up has started by the time it has.
    await Promise.allSettled([...this.#queued]);
    await this.#cleanups.close();
    await this.#watch.close();
  }

  /** Calls {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#isClosing) throw new RedisServiceClosedError('RedisLockService');
  }
}

/** Core validates metadata before it reaches a service; a direct caller's is checked here, before any I/O. */
function checkMetadata(metadata: unknown, field: string): string {
  if (typeof metadata !== 'string' || /\p{Cs}/u.test(metadata)) {
    throw new InvalidArgumentError(field, 'must be a well-formed string');
  }
  if (Buffer.byteLength(metadata) > MAX_METADATA_BYTES) {
    throw new InvalidArgumentError(field, `must be at most ${MAX_METADATA_BYTES} UTF-8 bytes`);
  }
  return metadata;
}
