import type { Clock, Lease, RenewRequest, RenewResult } from '@dlock/core';
import type { Standing } from '@dlock/core/adapter';
import type { Claim, Held, Wait } from './claims.js';
import type { RedisReleaseWatch } from './redis-release-watch.js';

/** A waiter looks again this long after the holder's lease should have run out (expiry without a release). */
const EXPIRY_SLACK_MS = 2;
/** When the holder's expiry is unknown, a waiter looks again after this long. */
const UNKNOWN_EXPIRY_RECHECK_MS = 1_000;

export const GONE: Standing<Wait> = { kind: 'gone' };
const LOOK_AGAIN: Standing<Wait> = { kind: 'behind', wait: { recheckInMs: 0 } };

/**
 * The latest moment, on the service's monotonic clock, that is surely not after the server started the grant's
 * lease. A grant made by the script itself (no `pttl`) started after the script was sent. One made earlier (by a
 * release handing over) started after `lastMiss`, the send of our last attempt that was still refused, and no
 * earlier than `sent + PTTL - TTL` as read by the script.
 */
export function leaseStart(
  pttl: number | undefined,
  sentAt: number,
  ttlMs: number,
  lastMiss: number,
): number {
  return pttl === undefined ? sentAt : Math.max(lastMiss, sentAt + pttl - ttlMs);
}

/** A hand-off whose lease ran out before it could be renewed: the claim looks again. */
function orLookAgain(standing: Standing<Wait> | undefined): Standing<Wait> {
  return standing ?? LOOK_AGAIN;
}

/** Renews leases (the renew script, one call); the standings extend a late hand-off with it. */
export type RenewOnce = (
  requests: readonly RenewRequest[],
  signal?: () => AbortSignal,
) => Promise<RenewResult[]>;

/**
 * Where a script's reply or a hand-off message puts a claim, in core's terms: first (with the grant core admits),
 * behind (with what to wait for) or gone. The claim's bookkeeping (`lastMiss`, `spent`, `placed`, `roundTripMs`) is
 * kept here, so that every path that hears of a grant reads it the same way.
 */
export class Standings {
  readonly #clock: Clock;
  readonly #watch: RedisReleaseWatch;
  readonly #renew: RenewOnce;

  constructor(clock: Clock, watch: RedisReleaseWatch, renew: RenewOnce) {
    this.#clock = clock;
    this.#watch = watch;
    this.#renew = renew;
  }

  /** Where the acquire script's reply puts the claim, for the attempt sent at `now`. */
  answered(claim: Claim, raw: unknown, now: number): Standing<Wait> | Promise<Standing<Wait>> {
    const { call } = claim;
    const answeredAt = this.#clock.monotonic();
    claim.roundTripMs = answeredAt - now;
    const reply = call.target.kind.parse(raw, claim, 'acquire');
    if (reply.granted) {
      const leaseFrom = leaseStart(reply.pttl, now, call.ttlMs, claim.lastMiss);
      const standing = this.granted(claim, reply, leaseFrom, answeredAt);
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
   * The claim holds the lock (or a semaphore's `slot`) with `fence`, its lease started no earlier than `leaseFrom`.
   * A grant handed over while it waited may have little of its lease left: if a third may already be gone, it is
   * extended first, so that the caller gets a handle with a full window instead of one core would find (nearly)
   * expired. Undefined if the lease ran out before that.
   */
  granted(
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
    const [result] = await this.#renew([{ lease, ttlMs: call.ttlMs }], call.signalOf);
    claim.roundTripMs = this.#clock.monotonic() - sentAt;
    return result?.renewed === true ? this.#first(claim, held, sentAt) : undefined;
  }

  #first(claim: Claim, held: Held, leaseFrom: number): Standing<Wait> {
    const { call, owner } = claim;
    // Only a queued claim registered a mailbox.
    if (claim.waiter !== undefined) this.#watch.unregister(owner);
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
}
