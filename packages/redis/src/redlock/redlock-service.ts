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
import { validateOwnerId } from '@dlock/core/adapter';
import { RedisServiceClosedError } from '../errors.js';
import { type RedlockServiceOptions, resolveRedlockOptions } from '../options.js';
import { newOwnershipToken } from '../tokens.js';
import { RedisRedlockNode } from './redis-node.js';
import { QuorumLock, UNDECIDED } from './redlock-protocol.js';
import { RedlockReleaseWatch } from './redlock-release-watch.js';

export type { RedlockServiceOptions } from '../options.js';

/**
 * Redlock over N independent Redis nodes, with fencing tokens that keep increasing across grants even when a
 * minority of nodes is down. Plug it into a `LockClient`; the client does the validity math, retries with full
 * jitter, renewal and loss detection.
 *
 * @example
 * ```ts
 * const clients = await Promise.all(urls.map((url) => createClient({ url }).on('error', log).connect()));
 * const locks = new LockClient(new RedlockService({ clients }));
 * await using lock = await locks.acquire('invoice:42', { ttlMs: 10_000, waitMs: 2_000 });
 * await db.write(invoice, { fencingToken: lock.fencingToken });
 * ```
 */
export class RedlockService implements LockService, AsyncDisposable {
  /** Nodes that must agree: `floor(N / 2) + 1`. */
  readonly quorum: number;
  readonly #lock: QuorumLock;
  readonly #watch: RedlockReleaseWatch;

  #closed = false;

  constructor(options: RedlockServiceOptions) {
    const { clients, keyPrefix, requestTimeoutMs, fenceRetentionMs, clock } = resolveRedlockOptions(options);
    const nodes = clients.map(
      (client, i) =>
        new RedisRedlockNode(client, { prefix: keyPrefix, fenceRetentionMs, label: `Redlock node ${i}` }),
    );
    this.#lock = new QuorumLock({ nodes, nodeTimeoutMs: requestTimeoutMs, clock, newOwnershipToken });
    this.quorum = this.#lock.quorum;
    const lock = this.#lock;
    this.#watch = new RedlockReleaseWatch(clients, keyPrefix, {
      clock,
      jitterMs: () => lock.wakeJitterMs(),
    });
  }

  /**
   * One attempt, never a wait: claims the lock on every node and, once a majority granted it, mints a fencing token
   * one above the highest counter among them and has a majority confirm it. Without a majority the claims are undone
   * and it answers `acquired: false`, with a `holderExpiresInMs` hint when no node took the claim; `LockClient` does
   * the waiting.
   *
   * @throws {TransportError} fewer than a majority answered, a majority did not confirm the token, or the claim
   *   took the whole TTL.
   */
  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    this.#assertOpen();
    validateName(request.name, 'request.name');
    validateOwnerId(request.ownerId, 'request.ownerId');
    checkTtl(request.ttlMs, 'request.ttlMs');
    const result = await this.#lock.acquire(request);
    if (result.acquired && this.#closed) {
      // Closed while the rounds ran: nobody may renew this grant any more, so it goes back at once.
      this.#lock.releaseInBackground({ name: request.name, ownerId: request.ownerId, ...result.grant });
      this.#assertOpen();
    }
    return result;
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    this.#assertOpen();
    checkRenew(request);
    const [decision] = await this.#lock.renew([request]);
    if (decision === undefined || decision === UNDECIDED) {
      throw new TransportError(
        `Redlock: too few nodes answered to confirm or refuse the renewal of "${request.lease.name}"`,
      );
    }
    return decision;
  }

  /**
   * One script call per node for the whole batch. The batch answer has no per-lease transport error, so a lease
   * the nodes could neither confirm nor refuse is reported not renewed (and released) — unless no lease in the
   * batch could be decided, which is a transport error for all (most likely a majority of nodes is down).
   */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    this.#assertOpen();
    for (const request of requests) checkRenew(request);
    const decisions = await this.#lock.renew(requests);
    if (decisions.length > 0 && decisions.every((d) => d === UNDECIDED)) {
      throw new TransportError('Redlock: too few nodes answered to confirm or refuse the renewals');
    }
    return decisions.map((decision, i) => {
      if (decision !== UNDECIDED) return decision;
      this.#lock.releaseInBackground((requests[i] as RenewRequest).lease);
      return { renewed: false };
    });
  }

  async release(lease: Lease): Promise<boolean> {
    this.#assertOpen();
    checkLease(lease, 'lease');
    return this.#lock.release(lease);
  }

  /** Wakes on release notices from any node. Expiry sends none: waiters rely on the holder's TTL hint for that. */
  watch(name: string, onReleased: () => void): () => void {
    validateName(name, 'name');
    if (typeof onReleased !== 'function') throw new InvalidArgumentError('onReleased', 'must be a function');
    return this.#watch.watch(name, onReleased);
  }

  /**
   * Closes the subscriber connections `watch` opened. The clients passed in stay open: they are the caller's.
   * Idempotent. Every call after it rejects with a `ClientClosedError` (code `CLIENT_CLOSED`); a grant that an
   * acquire in flight wins meanwhile is given back.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#lock.close();
    this.#watch.close();
  }

  /** Calls {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#closed) throw new RedisServiceClosedError('RedlockService');
  }
}

function checkTtl(ttlMs: unknown, field: string): void {
  if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TIMER_MS) {
    throw new InvalidArgumentError(field, `must be an integer from 1 to ${MAX_TIMER_MS}`);
  }
}

function checkLease(lease: Lease, field: string): void {
  if (typeof lease !== 'object' || lease === null) throw new InvalidArgumentError(field, 'must be a lease');
  validateName(lease.name, `${field}.name`);
  if (typeof lease.ownershipToken !== 'string' || lease.ownershipToken.length === 0) {
    throw new InvalidArgumentError(`${field}.ownershipToken`, 'must be a non-empty string');
  }
  if (typeof lease.fencingToken !== 'bigint') {
    throw new InvalidArgumentError(`${field}.fencingToken`, 'must be a bigint');
  }
}

function checkRenew(request: RenewRequest): void {
  checkLease(request.lease, 'request.lease');
  checkTtl(request.ttlMs, 'request.ttlMs');
}
