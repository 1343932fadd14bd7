import type { AcquireRequest, Lease } from '@dlock/core';
import type { LockKeys } from '../keys.js';
import type { LuaScript } from '../lua-script.js';
import type { Waiter } from './waiter.js';

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
export interface Held {
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

/** What a grant's lock key value starts with (then its counter and marks): renew and release compare this part. */
export function claimOf(lease: Lease): string {
  return `${lease.ownershipToken} ${lease.fencingToken}`;
}

/** The keys every lock script takes, in the order the scripts expect them. */
export function keyList(keys: LockKeys): string[] {
  return [keys.lock, keys.fence, keys.queue, keys.waiters];
}
