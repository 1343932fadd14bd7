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
import { type LockKeys, leaseKey, lockKeys } from '../keys.js';
import type { LuaScript, SendCommand } from '../lua-script.js';
import { newOwnershipToken } from '../tokens.js';
import type { CallState, Deadlines } from './deadlines.js';
import type { RedisReleaseWatch } from './redis-release-watch.js';
import { CLUSTER_RENEW, clusterRenewArgs, groupByMaster, type RenewItem } from './renew-batches.js';
import type { LockScripts } from './scripts.js';
import type { Waiter } from './waiter.js';

/** Renewals per script call: one call for a thousand locks, and no script long enough to stall the server. */
const RENEW_CHUNK = 1_000;
/** A waiter looks again this long after the holder's lease should have run out (expiry without a release). */
const EXPIRY_SLACK_MS = 2;
/** When the holder's expiry is unknown, a waiter looks again after this long. */
const UNKNOWN_EXPIRY_RECHECK_MS = 1_000;
/**
 * Bound on each try of a clean-up (when `requestTimeoutMs` is longer): while replies are being lost every try
 * times out, and the next one, which may be the one that gets through, must not wait for a long request bound.
 */
const CLEANUP_TRY_MS = 1_000;

/**
 * What one kind of queue (a lock's, a semaphore's) gives the driver below: the scripts that place a claim and take
 * it out, their arguments, and how their replies read. Everything else (waiting, hand-offs, give-up, extension of a
 * late hand-off) is the same for both.
 */
export interface QueueKind {
  readonly acquire: LuaScript;
  readonly leave: LuaScript;
  /**
   * The acquire script's arguments for `claim`: `waitMs` 0 when it does not queue, `channel` where its hand-offs
   * arrive, `recheck` when it looks again (a slot may have been handed to it meanwhile).
   */
  acquireArgs(claim: Claim, waitMs: number, channel: string, recheck: boolean): string[];
  /** An acquire or leave script's reply for `claim`; a refusal that ends the call (a semaphore's limit) throws. */
  parse(reply: unknown, claim: Claim, what: string): ScriptReply;
}

/**
 * Where a call queues: its kind, the keys every script of that kind takes (in order), and what its grant carries: a
 * lock's metadata (stored whichever path grants it: see `scripts.ts`), or a semaphore's limit.
 */
export interface QueueTarget {
  readonly kind: QueueKind;
  readonly keys: readonly string[];
  readonly stored?: string;
  readonly permits?: number;
}

/**
 * One acquire call as the service hands it to core's `acquireInQueue`: the request, plus what every claim made for
 * it shares.
 */
export class RedisAcquire implements AcquireRequest {
  /** End of the wait, set by the first claim: after core set its own, so never before it. */
  deadline: number | undefined = undefined;

  constructor(
    readonly name: string,
    readonly ownerId: string,
    readonly ttlMs: number,
    readonly target: QueueTarget,
    /** The clock's monotonic time at entry into the service's `acquire`: grants say when their lease began from it. */
    readonly calledAt: number,
    readonly waitMs: number,
    readonly signal: AbortSignal,
    /** The signal the call bounds listen to once a call is slow (read lazily: see `deadlines.ts`). */
    readonly signalOf: () => AbortSignal,
    /** Cluster: where hand-offs to this call's claims arrive (the service channel is used on a single node). */
    readonly wakeChannel?: string,
  ) {}

  /** Claims queue in Redis and wait for a hand-off; otherwise one attempt, and core's `LockClient` loop waits. */
  get queue(): boolean {
    return this.waitMs > 0;
  }
}

/** One attempt's place in the queue: its ownership token, named before any I/O. */
export interface Claim {
  readonly call: RedisAcquire;
  readonly owner: string;
  /** Where hand-offs to this claim arrive (queued claims only). */
  readonly waiter: Waiter | undefined;
  /** Redis may hold something of this claim (a queue entry or a grant), so leaving must run the leave script. */
  placed: boolean;
  /** Send time of the last attempt that was refused: a hand-off that follows started its lease after it. */
  lastMiss: number;
  /** Round trip of the last script call that answered. */
  roundTripMs: number;
  /**
   * Highest fence already handed to this claim, or known by a refusal to bound every token minted before it. A
   * hand-off message can overtake or trail the script reply that reports the same grant, or be heard only after the
   * script refused the claim (the grant ran out before the claim heard of it); a late copy must not be taken for a
   * new hand-off: the lock may belong to someone else by now.
   */
  spent: bigint;
}

/** A grant as a script or a hand-off message reports it: its token, and a permit's slot. */
interface Held {
  readonly fence: bigint;
  readonly slot?: number | undefined;
}

/** What a queued claim waits for, besides a hand-off: the holder's lease running out (0: look again at once). */
export interface Wait {
  readonly recheckInMs: number;
}

export type ScriptReply =
  /**
   * `pttl` is set when the grant predates the script that reported it (a hand-off not yet heard of); `slot` for a
   * semaphore's permit.
   */
  | { readonly granted: true; readonly fence: bigint; readonly pttl?: number; readonly slot?: number }
  /** `ceiling`: no token minted before the refusal is above it (see `Claim.spent`). */
  | { readonly granted: false; readonly pttl: number; readonly ceiling?: bigint };

export const DECIMAL = /^[1-9]\d*$/;
const GONE: Standing<Wait> = { kind: 'gone' };
const LOOK_AGAIN: Standing<Wait> = { kind: 'behind', wait: { recheckInMs: 0 } };

/**
 * The acquire and leave scripts answer with the fencing token (a string) when they granted the lock to the caller,
 * with {fencing token, PTTL} when the caller already held it, and with the holder's PTTL otherwise: alone (the leave
 * script) or as {PTTL, ceiling} (the acquire script's refusal).
 */
function parseReply(reply: unknown, _claim: Claim, what: string): ScriptReply {
  if (typeof reply === 'string' && DECIMAL.test(reply)) return { granted: true, fence: BigInt(reply) };
  if (typeof reply === 'number') return { granted: false, pttl: reply };
  if (Array.isArray(reply) && reply.length === 2) {
    const [first, second] = reply as unknown[];
    if (typeof first === 'string' && DECIMAL.test(first) && typeof second === 'number') {
      return { granted: true, fence: BigInt(first), pttl: second };
    }
    if (typeof first === 'number' && typeof second === 'string' && DECIMAL.test(second)) {
      return { granted: false, pttl: first, ceiling: BigInt(second) };
    }
  }
  throw unexpectedReply(what, reply);
}

/** The inspect script's {waiters[, fencing token, PTTL[, metadata[, owner id]]]} (metadata null: none). */
function parseInspect(reply: unknown): LockInfo {
  if (!Array.isArray(reply) || reply.length < 1 || reply.length > 5 || typeof reply[0] !== 'number') {
    throw unexpectedReply('inspect', reply);
  }
  const [waiters, fence, pttl, metadata, ownerId] = reply as [number, unknown, unknown, unknown, unknown];
  if (reply.length === 1) return { held: false, waiters };
  if (typeof fence !== 'string' || !DECIMAL.test(fence) || typeof pttl !== 'number') {
    throw unexpectedReply('inspect', reply);
  }
  // PTTL is -1 (no expiry) or -2 (gone) only for a key no grant of ours wrote: reported without an expiry.
  const expiry = pttl >= 0 ? { expiresInMs: pttl } : {};
  if (reply.length === 3) return { held: true, fencingToken: BigInt(fence), ...expiry, waiters };
  if (reply.length === 5) {
    if (typeof ownerId !== 'string' || (metadata !== null && typeof metadata !== 'string')) {
      throw unexpectedReply('inspect', reply);
    }
    const stored = metadata === null ? {} : { metadata };
    return { held: true, ownerId, fencingToken: BigInt(fence), ...stored, ...expiry, waiters };
  }
  if (typeof metadata !== 'string') throw unexpectedReply('inspect', reply);
  return { held: true, fencingToken: BigInt(fence), metadata, ...expiry, waiters };
}

/**
 * The latest moment, on the service's monotonic clock, that is surely not after the server started the grant's
 * lease. A grant made by the script itself (no `pttl`) started after the script was sent. One made earlier (by a
 * release handing over) started after `lastMiss`, the send of our last attempt that was still refused, and no
 * earlier than `sent + PTTL - TTL` as read by the script.
 */
function leaseStart(pttl: number | undefined, sentAt: number, ttlMs: number, lastMiss: number): number {
  return pttl === undefined ? sentAt : Math.max(lastMiss, sentAt + pttl - ttlMs);
}

/** What a grant's lock key value starts with (then its counter and marks): renew and release compare this part. */
function claimOf(lease: Lease): string {
  return `${lease.ownershipToken} ${lease.fencingToken}`;
}

/** The release script's "released" (a named function: no closure per release). */
function isOne(reply: unknown): boolean {
  return reply === 1;
}

/** A hand-off whose lease ran out before it could be renewed: the claim looks again. */
function orLookAgain(standing: Standing<Wait> | undefined): Standing<Wait> {
  return standing ?? LOOK_AGAIN;
}

/** A lock's queue: the acquire script places the claim (taking the lock if free), the leave script takes it out. */
export function lockQueue(scripts: LockScripts): QueueKind {
  return {
    acquire: scripts.acquire,
    leave: scripts.leave,
    acquireArgs(claim, waitMs, channel) {
      const { call } = claim;
      // The owner id always, the metadata when the grant carries some (see the acquire script).
      const args = [claim.owner, String(call.ttlMs), String(waitMs), waitMs > 0 ? channel : '', call.ownerId];
      const { stored } = call.target;
      if (stored !== undefined) args.push(stored);
      return args;
    },
    parse: parseReply,
  };
}

/** The keys every lock script takes, in the order the scripts expect them. */
export function keyList(keys: LockKeys): string[] {
  return [keys.lock, keys.fence, keys.queue, keys.waiters];
}

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
      return this.#granted(claim, event, claim.lastMiss);
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
    const standing = await this.#granted(
      claim,
      reply,
      leaseStart(reply.pttl, sentAt, claim.call.ttlMs, claim.lastMiss),
    );
    return standing ?? GONE;
  }

  /** The renew script: extends each lease whose claim (ownership and fencing token) still holds its key. */
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
    const keys = keyList(lockKeys(this.#prefix, lease.name));
    const state: CallState = { abandoned: false };
    const script = this.#scripts.release.run(this.#send, keys, [claimOf(lease)], state);
    return this.#deadlines.boundAndMap(script, this.#timeoutMs, 'release', isOne, { state });
  }

  /**
   * The watch script: a release publishes on the name's release channel only while the name is marked watched, and
   * unmarks it when the notice reached nobody. Run once the subscription is in place (and again after it was
   * lost), so that a mark never waits for a subscriber that is not there yet. Best effort.
   */
  markWatched(name: string, mark: 'w' | 'o' = 'w'): Promise<unknown> {
    return this.#deadlines.bound(
      this.#scripts.watch.run(this.#send, keyList(lockKeys(this.#prefix, name)), [mark]),
      this.#timeoutMs,
      'watch',
    );
  }

  /** The inspect script: the lock as the server sees it now, with the metadata stored with its grant. */
  async inspect(name: string): Promise<LockInfo> {
    const reply = await this.#deadlines.bound(
      this.#scripts.inspect.run(this.#send, keyList(lockKeys(this.#prefix, name)), []),
      this.#timeoutMs,
      'inspect',
    );
    return parseInspect(reply);
  }

  /** The update script: owner-checked like a renewal; keeps the fencing token and the lease's expiry. */
  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    const state: CallState = { abandoned: false };
    const reply = await this.#deadlines.bound(
      this.#scripts.update.run(
        this.#send,
        keyList(lockKeys(this.#prefix, lease.name)),
        [claimOf(lease), metadata],
        state,
      ),
      this.#timeoutMs,
      'update metadata',
      { state },
    );
    if (reply !== 1 && reply !== 0) throw unexpectedReply('update metadata', reply);
    return reply === 1;
  }

  #acquire(claim: Claim, recheck: boolean): Promise<Standing<Wait>> {
    const { call } = claim;
    const now = this.#clock.monotonic();
    const waitMs = call.queue ? Math.max(1, Math.ceil((call.deadline ?? now) - now)) : 0;
    const { kind } = call.target;
    const args = kind.acquireArgs(claim, waitMs, call.wakeChannel ?? this.#channel, recheck);
    // From here until the reply, the script may have granted or queued: a failure leaves it to be undone.
    claim.placed = true;
    // The reply is read in the reaction that settles the script's bound: no promise layer of its own.
    return this.#run(kind.acquire, claim, args, 'acquire', (raw) => this.#answered(claim, raw, now));
  }

  /** Where the acquire script's reply puts the claim, for the attempt sent at `now`. */
  #answered(claim: Claim, raw: unknown, now: number): Standing<Wait> | Promise<Standing<Wait>> {
    const { call } = claim;
    const answeredAt = this.#clock.monotonic();
    claim.roundTripMs = answeredAt - now;
    const reply = call.target.kind.parse(raw, claim, 'acquire');
    if (reply.granted) {
      const leaseFrom = leaseStart(reply.pttl, now, call.ttlMs, claim.lastMiss);
      const standing = this.#granted(claim, reply, leaseFrom, answeredAt);
      // A fresh grant is the answer as it is; only a hand-off renewed first waits for that renewal.
      return standing instanceof Promise ? standing.then(orLookAgain) : standing;
    }
    claim.lastMiss = now;
    if (reply.ceiling !== undefined && reply.ceiling > claim.spent) claim.spent = reply.ceiling;
    // Refused without queueing: nothing of this claim is in Redis.
    if (!call.queue) claim.placed = false;
    const pttl = reply.pttl;
    return {
      kind: 'behind',
      wait: { recheckInMs: pttl > 0 ? pttl + EXPIRY_SLACK_MS : UNKNOWN_EXPIRY_RECHECK_MS },
      // Only a fresh answer is a hint; a queued claim's would be as old as its wait by the time core passed it on.
      ...(!call.queue && pttl > 0 ? { holderExpiresInMs: pttl } : {}),
    };
  }

  /**
   * The claim holds the lock (or a semaphore's `slot`) with `fence`, its lease started no earlier than `leaseFrom`. A grant handed over while
   * it waited may have little of its lease left: if a third may already be gone, it is extended first, so that the
   * caller gets a handle with a full window instead of one core would find (nearly) expired. Undefined if the lease
   * ran out before that.
   */
  #granted(
    claim: Claim,
    held: Held,
    leaseFrom: number,
    now = this.#clock.monotonic(),
  ): Standing<Wait> | Promise<Standing<Wait> | undefined> {
    if (held.fence > claim.spent) claim.spent = held.fence;
    const { call } = claim;
    if (leaseFrom + call.ttlMs - now >= call.ttlMs / 3) {
      return this.#first(claim, held, leaseFrom);
    }
    return this.#extended(claim, held);
  }

  /** A grant with too little of its lease left, renewed before it is handed out; undefined if that failed. */
  async #extended(claim: Claim, held: Held): Promise<Standing<Wait> | undefined> {
    const { call, owner } = claim;
    const lease: Lease = {
      name: call.name,
      ownerId: call.ownerId,
      ownershipToken: owner,
      fencingToken: held.fence,
      ...(held.slot === undefined ? {} : { slot: held.slot }),
    };
    const sentAt = this.#clock.monotonic();
    const [result] = await this.#renewChunk([{ lease, ttlMs: call.ttlMs }], call.signalOf);
    claim.roundTripMs = this.#clock.monotonic() - sentAt;
    return result?.renewed === true ? this.#first(claim, held, sentAt) : undefined;
  }

  #first(claim: Claim, held: Held, leaseFrom: number): Standing<Wait> {
    const { call, owner } = claim;
    this.#watch.unregister(owner);
    const grant = {
      ownershipToken: owner,
      fencingToken: held.fence,
      ttlMs: call.ttlMs,
      // From entry into `acquire` to a moment not after the server started this grant's lease.
      queuedMs: Math.max(0, leaseFrom - call.calledAt),
      // One request's round trip, for core's admission check: not the whole wait since the lease began.
      roundTripMs: claim.roundTripMs,
    };
    return { kind: 'first', grant: held.slot === undefined ? grant : { ...grant, slot: held.slot } };
  }

  async #renewChunk(requests: readonly RenewRequest[], signal?: () => AbortSignal): Promise<RenewResult[]> {
    if (requests.length === 0) return [];
    if (this.#client.cluster) return this.#renewOnCluster(requests, signal);
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

  /** One script call per master (see `renew-batches.ts`); keys that moved meanwhile are renewed one by one. */
  async #renewOnCluster(
    requests: readonly RenewRequest[],
    signal?: () => AbortSignal,
  ): Promise<RenewResult[]> {
    const items = requests.map(({ lease, ttlMs }, index) => ({
      key: leaseKey(this.#prefix, lease),
      claim: claimOf(lease),
      ttlMs,
      index,
    }));
    const results: RenewResult[] = [];
    const renewGroup = async (group: readonly (typeof items)[number][], retry: boolean): Promise<void> => {
      const codes = await this.#clusterRenew(group, signal);
      const moved: (typeof items)[number][] = [];
      codes.forEach((code, i) => {
        const item = group[i] as (typeof items)[number];
        if (code === -1 && !retry) moved.push(item);
        // Routed by its own key and still not on that node: nothing is known about it, so it is not "not held".
        else if (code === -1)
          throw new TransportError(`renew: ${item.key} is not served where its slot points`);
        else results[item.index] = { renewed: code === 1 };
      });
      await Promise.all(moved.map((item) => renewGroup([item], true)));
    };
    // Each master answers for its own locks: one that is slow or cut off must not fail the renewals the others
    // made (its locks get no result, which core counts as a transport error for those locks alone).
    const outcomes = await Promise.allSettled(
      groupByMaster(this.#client, items).map((group) => renewGroup(group, false)),
    );
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (failed && outcomes.every((o) => o.status === 'rejected')) throw failed.reason;
    return results;
  }

  async #clusterRenew(items: readonly RenewItem[], signal?: () => AbortSignal): Promise<number[]> {
    const { keys, args } = clusterRenewArgs(items);
    const state: CallState = { abandoned: false };
    // Core waits for the whole batch, bounded by its own operationTimeoutMs (usually requestTimeoutMs or more): a
    // master that does not answer must fail its own group early enough that the others' answers still reach core,
    // and inside the leases' windows. So: three quarters of the request bound, and a third of the shortest lease.
    let shortest = Number.POSITIVE_INFINITY;
    for (const { ttlMs } of items) if (ttlMs < shortest) shortest = ttlMs;
    const reply = await this.#deadlines.bound(
      CLUSTER_RENEW.run(this.#send, keys, args, state),
      Math.max(1, Math.floor(Math.min(this.#timeoutMs * 0.75, shortest / 3))),
      `renew (${items.length})`,
      signal === undefined ? { state } : { state, signal },
    );
    if (
      !Array.isArray(reply) ||
      reply.length !== items.length ||
      !reply.every((c) => c === 1 || c === 0 || c === -1)
    ) {
      throw unexpectedReply('renew', reply);
    }
    return reply as number[];
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
  ): Promise<R>;
  #run<R>(
    script: LuaScript,
    claim: Claim,
    args: string[],
    what: string,
    map?: (reply: unknown) => R | PromiseLike<R>,
  ): Promise<unknown> {
    const state: CallState = { abandoned: false };
    const sent = script.run(this.#send, claim.call.target.keys, args, state);
    const options = { state, signal: claim.call.signalOf };
    return map === undefined
      ? this.#deadlines.bound(sent, this.#timeoutMs, what, options)
      : this.#deadlines.boundAndMap(sent, this.#timeoutMs, what, map, options);
  }
}
