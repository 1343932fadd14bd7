import {
  type AcquireRequest,
  type Clock,
  type Lease,
  type LockInfo,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import type { QueueDriver, Standing } from '@dlock/core/adapter';
import type { RedisConnection } from '../clients/connection.js';
import { unexpectedReply } from '../errors.js';
import { leaseKey, lockKeys } from '../keys.js';
import type { LuaScript, SendCommand } from '../lua-script.js';
import { newOwnershipToken } from '../tokens.js';
import { type Claim, claimOf, keyList, RedisAcquire, type Wait } from './claims.js';
import type { BoundOptions, CallState, Deadlines } from './deadlines.js';
import type { RedisReleaseWatch } from './redis-release-watch.js';
import { ClusterRenewals } from './renew-batches.js';
import { isOne, parseInspect, parseUpdate } from './script-replies.js';
import type { LockScripts } from './scripts.js';
import { GONE, leaseStart, Standings } from './standings.js';

/** Renewals per script call: one call for a thousand locks, and no script long enough to stall the server. */
const RENEW_CHUNK = 1_000;
/**
 * Bound on each try of a clean-up (when `requestTimeoutMs` is longer): while replies are being lost every try
 * times out, and the next one, which may be the one that gets through, must not wait for a long request bound.
 */
const CLEANUP_TRY_MS = 1_000;
/** Names whose key lists are kept (see `keysOf`); the cache starts over when it is full. */
const KEY_CACHE_NAMES = 1_024;

export interface RedisProtocolParts {
  readonly client: RedisConnection;
  readonly scripts: LockScripts;
  readonly deadlines: Deadlines;
  readonly clock: Clock;
  readonly requestTimeoutMs: number;
  readonly keyPrefix: string;
  /** This service's wake-up channel: the release script publishes hand-offs for our waiters there. */
  readonly channel: string;
  readonly watch: RedisReleaseWatch;
}

/**
 * The single-node lock protocol, as core's queue driver plus renew and release. Every step is one Lua script
 * (`scripts.ts`), atomic on the server: the queue lives in Redis, and a release hands the lock to the oldest live
 * waiter inside its own script, with one message to that waiter's process. Core's `acquireInQueue` runs the loop
 * (queue, wait, re-check, leave on deadline, abort or failure); these are its steps.
 */
export class RedisProtocol implements QueueDriver<Claim, Wait> {
  readonly #client: RedisConnection;
  readonly #scripts: LockScripts;
  readonly #deadlines: Deadlines;
  readonly #clock: Clock;
  readonly #timeoutMs: number;
  readonly #prefix: string;
  readonly #channel: string;
  readonly #watch: RedisReleaseWatch;
  readonly #standings: Standings;
  readonly #keyCache = new Map<string, readonly string[]>();
  readonly #cluster: ClusterRenewals;
  readonly #send: SendCommand = (args) => {
    // Fail fast rather than sit in node-redis' offline queue and run after the caller gave up (node-redis #1039).
    if (!this.#client.isReady()) {
      return Promise.reject(new TransportError('the Redis client is not connected'));
    }
    return this.#client.send(args, undefined);
  };

  constructor(parts: RedisProtocolParts) {
    this.#client = parts.client;
    this.#scripts = parts.scripts;
    this.#deadlines = parts.deadlines;
    this.#clock = parts.clock;
    this.#timeoutMs = parts.requestTimeoutMs;
    this.#prefix = parts.keyPrefix;
    this.#channel = parts.channel;
    this.#watch = parts.watch;
    // A late hand-off is extended by one renew script call (never split: it is one lease).
    this.#standings = new Standings(parts.clock, parts.watch, (requests, signal) =>
      this.#renewChunk(requests, signal),
    );
    this.#cluster = new ClusterRenewals({ ...parts, send: this.#send });
  }

  /** Sends one command the way every script of this service goes (fail-fast while disconnected). */
  get send(): SendCommand {
    return this.#send;
  }

  /** A new ownership token; a queued claim's mailbox is registered now, before its first script can grant. */
  claim(request: AcquireRequest): Claim {
    if (!(request instanceof RedisAcquire)) throw new TypeError('RedisProtocol claims only a RedisAcquire');
    // A call that does not queue has no wait: its deadline is its start (and saves a clock read).
    request.deadline ??= request.queue ? this.#clock.monotonic() + request.waitMs : request.calledAt;
    const owner = newOwnershipToken();
    return {
      call: request,
      owner,
      waiter: request.queue ? this.#watch.register(owner) : undefined,
      placed: false,
      lastMiss: request.calledAt,
      roundTripMs: 0,
      spent: 0n,
    };
  }

  /**
   * The acquire script: grants a free lock (a free lock with waiters goes to the oldest live one first, so a caller
   * that does not queue never overtakes the queue), else queues the claim when it waits, and answers the holder's
   * remaining lease.
   */
  enqueue(claim: Claim): Promise<Standing<Wait>> {
    return this.#acquire(claim, false);
  }

  /**
   * The acquire script again, with the same token: it keeps the claim's place in the queue, or finds the lock
   * already handed to it. (Core does not re-check after a wait that ran out at the deadline: it gives up, and the
   * give-up script itself keeps a hand-off that came at the last moment.)
   */
  check(claim: Claim): Promise<Standing<Wait>> {
    return this.#acquire(claim, true);
  }

  /**
   * Waits for a hand-off message to this claim, or until the holder's lease should have run out (a holder that
   * dies never releases, and nobody else would tell us). A hand-off is the answer itself: no script is run to take
   * the turn.
   */
  async wait(claim: Claim, wait: Wait, ms: number, signal: AbortSignal): Promise<Standing<Wait> | undefined> {
    const waitMs = Math.min(wait.recheckInMs, ms);
    if (claim.waiter === undefined) {
      await this.#clock.sleep(waitMs, signal);
      return undefined;
    }
    const event = await claim.waiter.wait(waitMs, signal);
    if (event.kind === 'aborted') throw signal.reason;
    if (event.kind === 'granted' && event.fence > claim.spent) {
      return this.#standings.granted(claim, event, claim.lastMiss);
    }
    return undefined;
  }

  /**
   * The leave script, giving up a grant made to this claim (handing it on): the owner-checked undo after an
   * abandoned or failed acquire. Sent whole (an empty script cache cannot stop it) and bounded per try.
   */
  async leave(claim: Claim): Promise<void> {
    this.#watch.unregister(claim.owner);
    if (!claim.placed) return;
    await this.#deadlines.bound(
      claim.call.target.kind.leave.runWhole(this.#send, claim.call.target.keys, [claim.owner, '0']),
      Math.min(this.#timeoutMs, CLEANUP_TRY_MS),
      'leave queue (clean-up)',
    );
  }

  /** The leave script at the deadline, keeping the lock if a hand-off reached this claim at the last moment. */
  async giveUp(claim: Claim): Promise<Standing<Wait>> {
    this.#watch.unregister(claim.owner);
    if (!claim.placed) return GONE;
    const sentAt = this.#clock.monotonic();
    const { kind } = claim.call.target;
    const raw = await this.#run(kind.leave, claim, [claim.owner, '1'], 'leave queue');
    claim.roundTripMs = this.#clock.monotonic() - sentAt;
    const reply = kind.parse(raw, claim, 'leave');
    if (!reply.granted) {
      claim.placed = false;
      return GONE;
    }
    const standing = await this.#standings.granted(
      claim,
      reply,
      leaseStart(reply.pttl, sentAt, claim.call.ttlMs, claim.lastMiss),
    );
    return standing ?? GONE;
  }

  /**
   * The renew script: extends each lease whose claim (ownership and fencing token) still holds its key; on a cluster,
   * one call per master (`renew-batches.ts`).
   */
  async renew(requests: readonly RenewRequest[], signal?: () => AbortSignal): Promise<RenewResult[]> {
    if (requests.length <= RENEW_CHUNK) return this.#renewChunk(requests, signal);
    const chunks: Promise<RenewResult[]>[] = [];
    for (let i = 0; i < requests.length; i += RENEW_CHUNK) {
      chunks.push(this.#renewChunk(requests.slice(i, i + RENEW_CHUNK), signal));
    }
    return (await Promise.all(chunks)).flat();
  }

  /**
   * The release script: owner-checked, it hands the lock to the oldest live waiter in the same step, or leaves a
   * tombstone that keeps the name's counter for the next grant.
   */
  release(lease: Lease): Promise<boolean> {
    const state: CallState = { abandoned: false };
    const script = this.#scripts.release.run(this.#send, this.keysOf(lease.name), [claimOf(lease)], state);
    return this.#deadlines.boundAndMap(script, this.#timeoutMs, 'release', isOne, { state });
  }

  /**
   * The watch script: a release publishes on the name's release channel only while the name is marked watched, and
   * unmarks it when the notice reached nobody. Run once the subscription is in place (and again after it was
   * lost), so that a mark never waits for a subscriber that is not there yet. Best effort.
   */
  markWatched(name: string, mark: 'w' | 'o' = 'w'): Promise<unknown> {
    return this.#deadlines.bound(
      this.#scripts.watch.run(this.#send, this.keysOf(name), [mark]),
      this.#timeoutMs,
      'watch',
    );
  }

  /** The inspect script: the lock as the server sees it now, with the metadata stored with its grant. */
  async inspect(name: string): Promise<LockInfo> {
    const reply = await this.#deadlines.bound(
      this.#scripts.inspect.run(this.#send, this.keysOf(name), []),
      this.#timeoutMs,
      'inspect',
    );
    return parseInspect(reply);
  }

  /** The update script: owner-checked like a renewal; keeps the fencing token and the lease's expiry. */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const state: CallState = { abandoned: false };
    const reply = await this.#deadlines.bound(
      this.#scripts.update.run(this.#send, this.keysOf(lease.name), [claimOf(lease), metadata], state),
      this.#timeoutMs,
      'update metadata',
      { state },
    );
    return parseUpdate(reply);
  }

  #acquire(claim: Claim, recheck: boolean): Promise<Standing<Wait>> {
    const { call } = claim;
    // A call that does not queue sends its one attempt right after it began: its clock reading serves (an earlier
    // send time only shortens the window and lengthens the round trip core sees).
    const now = recheck || call.queue ? this.#clock.monotonic() : call.calledAt;
    const waitMs = call.queue ? Math.max(1, Math.ceil((call.deadline ?? now) - now)) : 0;
    const { kind } = call.target;
    const args = kind.acquireArgs(claim, waitMs, call.wakeChannel ?? this.#channel, recheck);
    // From here until the reply, the script may have granted or queued: a failure leaves it to be undone.
    claim.placed = true;
    // The reply is read in the reaction that settles the script's bound: no promise layer of its own.
    return this.#run(
      kind.acquire,
      claim,
      args,
      'acquire',
      (raw) => this.#standings.answered(claim, raw, now),
      now,
    );
  }

  /**
   * The keys every lock script takes, for lock `name`; the same array for a name while it is cached (callers never
   * change it). Built once per name rather than twice per acquire and release cycle: five strings and an array, and
   * a client writes a string it was given built (not concatenated) without flattening it first.
   */
  keysOf(name: string): readonly string[] {
    let keys = this.#keyCache.get(name);
    if (keys === undefined) {
      // A bound on what the cache keeps: an application may use any number of names.
      if (this.#keyCache.size >= KEY_CACHE_NAMES) this.#keyCache.clear();
      keys = keyList(lockKeys(this.#prefix, name));
      this.#keyCache.set(name, keys);
    }
    return keys;
  }

  async #renewChunk(requests: readonly RenewRequest[], signal?: () => AbortSignal): Promise<RenewResult[]> {
    if (requests.length === 0) return [];
    if (this.#client.cluster) return this.#cluster.renew(requests, signal);
    const keys: string[] = [];
    const args: string[] = [];
    for (const { lease } of requests) {
      keys.push(leaseKey(this.#prefix, lease));
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
    if (!Array.isArray(reply) || reply.length !== requests.length) throw unexpectedReply('renew', reply);
    return reply.map((flag) => ({ renewed: flag === 1 }));
  }

  /**
   * One script call for `claim`, bounded by the request timeout. A caller that gives up (core aborts the request's
   * signal when it abandons the call) ends it at once, so that the undo starts then, not at this call's own,
   * possibly much later, deadline.
   */
  #run(script: LuaScript, claim: Claim, args: string[], what: string): Promise<unknown>;
  #run<R>(
    script: LuaScript,
    claim: Claim,
    args: string[],
    what: string,
    map: (reply: unknown) => R | PromiseLike<R>,
    now: number,
  ): Promise<R>;
  #run<R>(
    script: LuaScript,
    claim: Claim,
    args: string[],
    what: string,
    map?: (reply: unknown) => R | PromiseLike<R>,
    now?: number,
  ): Promise<unknown> {
    const state: CallState = { abandoned: false };
    const sent = script.run(this.#send, claim.call.target.keys, args, state);
    const options: BoundOptions =
      now === undefined
        ? { state, signal: claim.call.signalOf }
        : { state, signal: claim.call.signalOf, now };
    return map === undefined
      ? this.#deadlines.bound(sent, this.#timeoutMs, what, options)
      : this.#deadlines.boundAndMap(sent, this.#timeoutMs, what, map, options);
  }
}
