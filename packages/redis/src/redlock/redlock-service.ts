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
  systemClock,
  TransportError,
  validateName,
} from '@dlock/core';
import { checkNodeRedisClient } from '../client-kind.js';
import type { RedlockClientLike } from '../client-like.js';
import { DEFAULT_REDLOCK_PREFIX, validateKeyPrefix } from '../keys.js';
import {
  checkClock,
  checkFenceRetentionMs,
  checkOptionsObject,
  checkTimeoutMs,
  DEFAULT_FENCE_RETENTION_MS,
} from '../options.js';
import { newOwnershipToken } from '../tokens.js';
import { QuorumLock, UNDECIDED } from './quorum-lock.js';
import { RedisRedlockNode } from './redis-node.js';
import { RedlockReleaseWatch } from './redlock-release-watch.js';

export interface RedlockServiceOptions {
  /**
   * Connected node-redis clients, one per independent Redis node (not replicas of each other, not one cluster).
   * An odd number, 3 or 5, is usual: a lock needs a majority, `floor(N / 2) + 1`, of them.
   */
  readonly clients: readonly RedlockClientLike[];
  /** Prefix of every key and channel. Default `dlock:redlock:`. Must not contain `{` or `}`. */
  readonly keyPrefix?: string;
  /**
   * Bound, in ms, on each round of calls to the nodes (acquire takes two rounds). A node that has not answered by
   * then counts as failed for that round. Keep it well below the TTLs you use. Default 250.
   */
  readonly nodeTimeoutMs?: number;
  /**
   * How long each node keeps a name's fencing counter after its last grant or renewal, in ms. Default 7 days. A
   * counter that is gone (expired, or lost in a restart) is reseeded from that node's clock; see the README.
   */
  readonly fenceRetentionMs?: number;
  /** Time source for round deadlines. Default the system clock. */
  readonly clock?: Clock;
}

const DEFAULT_NODE_TIMEOUT_MS = 250;
const OPTION_KEYS = ['clients', 'keyPrefix', 'nodeTimeoutMs', 'fenceRetentionMs', 'clock'] as const;

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
  readonly #notices: RedlockReleaseWatch;

  constructor(options: RedlockServiceOptions) {
    checkOptionsObject(options, 'options', OPTION_KEYS, '`clients`');
    const clients: unknown = options['clients'];
    if (!Array.isArray(clients) || clients.length === 0) {
      throw new InvalidArgumentError('options.clients', 'must be a non-empty array of node-redis clients');
    }
    clients.forEach((client: unknown, i) => {
      checkNodeRedisClient(client, `options.clients[${i}]`);
    });
    // One node counted twice would let a single Redis make up a "majority".
    if (new Set(clients).size !== clients.length) {
      throw new InvalidArgumentError('options.clients', 'must not contain the same client twice');
    }
    const o = options as RedlockServiceOptions;
    const prefix = o.keyPrefix === undefined ? DEFAULT_REDLOCK_PREFIX : validateKeyPrefix(o.keyPrefix);
    const nodeTimeoutMs = o.nodeTimeoutMs ?? DEFAULT_NODE_TIMEOUT_MS;
    checkTimeoutMs(nodeTimeoutMs, 'options.nodeTimeoutMs', true);
    const fenceRetentionMs = o.fenceRetentionMs ?? DEFAULT_FENCE_RETENTION_MS;
    checkFenceRetentionMs(fenceRetentionMs);
    if (o.clock !== undefined) checkClock(o.clock, 'options.clock');
    const clock = o.clock ?? systemClock;
    const nodes = (clients as RedlockClientLike[]).map(
      (client, i) => new RedisRedlockNode(client, { prefix, fenceRetentionMs, label: `Redlock node ${i}` }),
    );
    this.#lock = new QuorumLock({ nodes, nodeTimeoutMs, clock, newOwnershipToken });
    this.quorum = this.#lock.quorum;
    const lock = this.#lock;
    this.#notices = new RedlockReleaseWatch(clients as RedlockClientLike[], prefix, {
      clock,
      jitterMs: () => lock.wakeJitterMs(),
    });
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    validateName(request.name, 'request.name');
    checkTtl(request.ttlMs, 'request.ttlMs');
    return this.#lock.acquire(request);
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
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
    checkLease(lease, 'lease');
    return this.#lock.release(lease);
  }

  /** Wakes on release notices from any node. Expiry sends none: waiters rely on the holder's TTL hint for that. */
  watch(name: string, onReleased: () => void): () => void {
    validateName(name, 'name');
    if (typeof onReleased !== 'function') throw new InvalidArgumentError('onReleased', 'must be a function');
    return this.#notices.watch(name, onReleased);
  }

  /** Closes the subscriber connections `watch` opened. The clients passed in stay open: they are the caller's. */
  async close(): Promise<void> {
    this.#notices.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
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
