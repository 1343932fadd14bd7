import { randomBytes } from 'node:crypto';
import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  type Lease,
  type RenewRequest,
  type RenewResult,
  TransportError,
} from '@dlock/core';
import {
  type NodeAcquireReply,
  type NodeConfirm,
  NodeNotConnectedError,
  type NodeRelease,
  type NodeReleaseReply,
  type NodeRenew,
  type NodeRenewReply,
  type RedlockNode,
} from './node.js';
import { type Outcome, RoundDeadlines, runRound } from './round.js';

/** The scripts compare counters as Lua doubles: exact only below 2^53. */
const MAX_TOKEN = 2n ** 53n - 1n;

/** Leases per renew script call: bounds the time one script blocks a node. */
export const RENEW_CHUNK = 500;

/** Weight of the newest claim round in the running estimate of how long a claim round takes. */
const ROUND_SMOOTHING = 0.2;

/** Pauses between the tries of one node's clean-up whose call failed: doubling from the first to the last. */
const UNDO_FIRST_PAUSE_MS = 50;
const UNDO_MAX_PAUSE_MS = 1_000;
/** Pauses between the tries of one node's release whose call failed, within the release's bound. */
const RELEASE_FIRST_PAUSE_MS = 25;
const RELEASE_MAX_PAUSE_MS = 200;

export interface QuorumLockOptions {
  readonly nodes: readonly RedlockNode[];
  /** Deadline of each round; every node call in it is bounded by this. */
  readonly nodeTimeoutMs: number;
  readonly clock: Clock;
  readonly newOwnershipToken: () => string;
}

/** A renewal the nodes neither confirmed nor refused: too many of them failed to answer. */
export const UNDECIDED = Symbol('undecided');
export type RenewDecision = RenewResult | typeof UNDECIDED;

/**
 * The Redlock algorithm with fencing tokens, over any set of {@link RedlockNode}s.
 *
 * acquire, round 1: every node claims the key (`SET NX PX`) and reports its fencing counter. Fewer than a majority
 * of claims: release everywhere that did not refuse, and report busy (or unreachable).
 * acquire, round 2: token = max(counters of the claiming nodes) + 1; every node that did not refuse raises its
 * counter to the token if it still holds this grant's key and its counter is below the token. The grant stands
 * only if a majority raised.
 *
 * Why tokens are unique and ordered: two grants' raising majorities share a node. Whichever raised there second
 * raised from a counter at least the first one's token, so its own token is higher. A grant's raises all happen
 * before it is handed out, so a grant whose acquire started after another was handed out raised second and has
 * the higher token. No clock is involved; the counters must survive, and a node that lost one reseeds it from its
 * clock (see the README for that assumption).
 */
export class QuorumLock {
  readonly quorum: number;
  readonly #nodes: readonly RedlockNode[];
  readonly #deadlines: RoundDeadlines;
  readonly #clock: Clock;
  readonly #newOwnershipToken: () => string;
  /** Running estimate of a claim round's duration, ms (undefined before the first round). */
  #claimRoundMs: number | undefined;
  /** Aborted by {@link close}: ends the clean-ups still trying. */
  readonly #closing = new AbortController();

  constructor(options: QuorumLockOptions) {
    this.#nodes = options.nodes;
    this.quorum = Math.floor(options.nodes.length / 2) + 1;
    this.#deadlines = new RoundDeadlines(options.clock, options.nodeTimeoutMs);
    this.#clock = options.clock;
    this.#newOwnershipToken = options.newOwnershipToken;
  }

  /**
   * How far apart (ms) waiters woken by the same release notice should spread their next claims. Contenders that
   * claim at the same moment each win the nodes nearest to them, and with nodes at different distances that splits
   * the nodes between them again and again; spread over twice a claim round, one of them usually gets ahead.
   */
  wakeJitterMs(): number {
    return Math.min(this.#deadlines.timeoutMs, 2 * (this.#claimRoundMs ?? 0));
  }

  /** Stops the clean-ups still waiting to try again; nothing else runs in the background for long. */
  close(): void {
    this.#closing.abort();
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    const { name, ttlMs, signal } = request;
    const n = this.#nodes.length;
    const q = this.quorum;
    const ownershipToken = this.#newOwnershipToken();
    const startedAt = this.#clock.monotonic();

    const claims = await this.#round<NodeAcquireReply>(
      (node, s) => node.acquire({ name, ownershipToken, ttlMs }, s),
      (outcomes) => {
        const c = countClaims(outcomes);
        if (c.granted >= q) return true;
        if (c.granted + c.pending >= q) return false;
        // No quorum possible; wait only while more answers could still tell "busy" from "unreachable".
        const answered = c.granted + c.refused;
        return answered >= q || answered + c.pending < q;
      },
      signal,
    );
    const roundMs = this.#clock.monotonic() - startedAt;
    // Only rounds that ended by decision: one cut short by the deadline (a node down) or by the caller says nothing
    // about how far apart rivals' claims land, and would make every wake-up late.
    if (!signal.aborted && roundMs < this.#deadlines.timeoutMs) {
      this.#claimRoundMs =
        this.#claimRoundMs === undefined
          ? roundMs
          : this.#claimRoundMs + ROUND_SMOOTHING * (roundMs - this.#claimRoundMs);
    }
    // The caller gave up (core abandons the call at its deadline): undo at once, not after the round's deadline.
    if (signal.aborted) {
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      throw signal.reason;
    }
    const c = countClaims(claims);
    if (c.granted < q) {
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      if (c.granted + c.refused < q) {
        throw new TransportError(
          `Redlock: only ${c.granted + c.refused} of ${n} nodes answered the claim on "${name}" (quorum ${q})`,
          { cause: firstError(claims) },
        );
      }
      // A node we claimed is free of any holder: the claims that turned us away elsewhere may all be rivals' claims
      // as doomed as ours, whose TTLs say nothing about when the lock frees up. No hint: the caller backs off with
      // jitter instead of all rivals sleeping for the same TTL and retrying together.
      if (c.granted > 0) return { acquired: false };
      const hint = holderExpiry(claims, q - c.granted);
      return hint === undefined ? { acquired: false } : { acquired: false, holderExpiresInMs: hint };
    }
    const elapsed = this.#clock.monotonic() - startedAt;
    if (elapsed >= ttlMs) {
      // Every claim may already have expired: nothing is left to mint for.
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      throw new TransportError(`Redlock: claiming "${name}" took ${Math.round(elapsed)} ms, the whole TTL`);
    }

    let max = 0n;
    for (const outcome of claims) {
      if (outcome.status === 'ok' && outcome.value.granted && outcome.value.counter > max) {
        max = outcome.value.counter;
      }
    }
    const fencingToken = max + 1n;
    if (fencingToken > MAX_TOKEN) {
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      throw new TransportError(`Redlock: the fencing counter of "${name}" reached 2^53`);
    }
    // Nodes that timed out in round 1 are asked too: their claim may have landed, and a node runs one
    // connection's commands in order, so the raise cannot overtake the claim.
    const targets = claims.flatMap((outcome, i) => (isRefusal(outcome) ? [] : [i]));
    const raises = await runRound<boolean>(
      targets.length,
      (j, s) =>
        (this.#nodes[targets[j] as number] as RedlockNode).mint({ name, ownershipToken, fencingToken }, s),
      {
        deadlines: this.#deadlines,
        signal,
        decided: (outcomes) => {
          const confirmed = countConfirmed(outcomes);
          const pending = outcomes.filter((o) => o.status === 'pending').length;
          return confirmed >= q || confirmed + pending < q;
        },
      },
    );
    const confirmed = countConfirmed(raises);
    if (signal.aborted) {
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      throw signal.reason;
    }
    if (confirmed < q) {
      this.#cleanup(name, ownershipToken, claims, startedAt + ttlMs);
      throw new TransportError(
        `Redlock: only ${confirmed} of ${n} nodes confirmed fencing token ${fencingToken} for "${name}" (quorum ${q})`,
        { cause: firstError(raises) },
      );
    }
    // The full TTL, not TTL − elapsed: core measures validity from before this call was sent, which already
    // subtracts the time both rounds took (and renewals must ask for the full TTL again).
    return { acquired: true, grant: { ownershipToken, fencingToken, ttlMs } };
  }

  /** Renews on every node at once; a lease is renewed only if a majority still held its key and extended it. */
  async renew(requests: readonly RenewRequest[]): Promise<RenewDecision[]> {
    if (requests.length <= RENEW_CHUNK) return this.#renewChunk(requests);
    const chunks: Promise<RenewDecision[]>[] = [];
    for (let i = 0; i < requests.length; i += RENEW_CHUNK) {
      chunks.push(this.#renewChunk(requests.slice(i, i + RENEW_CHUNK)));
    }
    return (await Promise.all(chunks)).flat();
  }

  /**
   * Owner-checked delete on every node. True once a majority deleted the lease's key (each one the lease's since its
   * last confirmed renewal): the lease held the lock until then. False once so many nodes did not that no majority
   * can have (the lock was lost, maybe to a rival). Otherwise a `TransportError`: the outcome is unknown, and the
   * lock may stay held until its TTL. Ends once either is decided (a paused node does not delay it).
   * One delete among more than N − quorum answers was "released": with a rival holding the lock on a majority that
   * had lost the lease's keys, the one node still keeping it made the answer.
   *
   * A node whose try failed (its connection dropped, its client reconnecting) is tried again until the release's
   * bound (one round timeout) or close(), also after the round was decided without it: one try per node told
   * "released" while the nodes still holding the key were a majority (nobody could take the lock until its TTL),
   * and left a minority's keys to their TTL for nothing.
   */
  async release(lease: Lease): Promise<boolean> {
    const n = this.#nodes.length;
    const q = this.quorum;
    const request = {
      name: lease.name,
      ownershipToken: lease.ownershipToken,
      notice: lease.fencingToken.toString(),
    };
    const bound = new AbortController();
    const closing = this.#closing.signal;
    const end = (): void =>
      bound.abort(new TransportError(`release of "${lease.name}": no answer within its bound`));
    const cancelDeadline = this.#deadlines.add(end);
    closing.addEventListener('abort', end, { once: true });
    if (closing.aborted) end();
    let open = n;
    const settled = (): void => {
      open -= 1;
      if (open > 0) return;
      cancelDeadline();
      closing.removeEventListener('abort', end);
    };
    const outcomes = await this.#round<boolean | undefined>(
      // The round's own signal is not passed on: a try in flight when the round is decided still deletes its key.
      (node) => {
        const tries = this.#releaseOn(node, request, bound.signal);
        tries.then(settled, settled);
        return tries;
      },
      (results) => {
        const { answered, deleted } = countDeletes(results);
        return deleted >= q || answered - deleted > n - q;
      },
    );
    const { answered, deleted } = countDeletes(outcomes);
    // "Released" needs a majority that held the lease's key up to the delete; "lost" needs so many nodes without it
    // that no majority can have held it (the silent nodes may be the majority that does, and delete it when the
    // command they were sent runs).
    if (deleted >= q) return true;
    if (answered - deleted > n - q) return false;
    throw new TransportError(
      `Redlock: only ${answered} of ${n} nodes answered the release of "${lease.name}", ${deleted} of them deleting it (quorum ${q})`,
      { cause: firstError(outcomes) },
    );
  }

  /**
   * One node's part of a release, tried again while its call fails, until `bound` ends: whether the node deleted the
   * lease's key, or `undefined` when that cannot be told. No key after a try that may have been applied (any failure
   * but {@link NodeNotConnectedError}) cannot: that try may have deleted the lease's key, or the key may have been
   * gone before it (lost to a rival that has let go since, or a re-taken key that proves nothing). Counted as a
   * delete, it made a release "released" while a rival had held the lock on nodes this lease had lost; counted as no
   * delete, it would call a lease lost that was released. Another owner's key is no delete.
   */
  async #releaseOn(
    node: RedlockNode,
    request: NodeRelease,
    bound: AbortSignal,
  ): Promise<boolean | undefined> {
    let maybeApplied = false;
    for (let pauseMs = RELEASE_FIRST_PAUSE_MS; ; pauseMs = Math.min(2 * pauseMs, RELEASE_MAX_PAUSE_MS)) {
      try {
        const reply = await node.release(request, bound);
        if (reply === 'absent' && maybeApplied) return undefined;
        return reply === 'deleted';
      } catch (error) {
        if (!(error instanceof NodeNotConnectedError)) maybeApplied = true;
        if (bound.aborted) throw error;
        // Unref'd: a release must not keep the process alive; the lease's TTL is the backstop.
        await this.#clock.sleep(pauseMs, bound, { unref: true }).catch(() => {});
        if (bound.aborted) throw error;
      }
    }
  }

  async #renewChunk(requests: readonly RenewRequest[]): Promise<RenewDecision[]> {
    const n = this.#nodes.length;
    const q = this.quorum;
    const items: NodeRenew[] = requests.map(({ lease, ttlMs }) => ({
      name: lease.name,
      ownershipToken: lease.ownershipToken,
      fencingToken: lease.fencingToken,
      ttlMs,
    }));
    // Keyed by node: a call that throws before returning its promise has no entry, and shifts nobody's answers.
    const calls = new Map<number, Promise<readonly NodeRenewReply[]>>();
    const outcomes = await this.#round<readonly NodeRenewReply[]>(
      (node, s, index) => {
        const call = node.renew(items, s);
        calls.set(index, call);
        return call;
      },
      (results) => items.every((_, i) => decideRenewal(results, i, n, q) !== UNDECIDED),
    );
    const decisions = requests.map(({ lease }, i) => {
      const decision = decideRenewal(outcomes, i, n, q);
      // Keys this lease still has on a minority would only block the next owner until they expire.
      if (decision !== UNDECIDED && !decision.renewed) this.releaseInBackground(lease);
      return decision;
    });
    if (decisions.some((decision) => decision !== UNDECIDED && decision.renewed)) {
      calls.forEach((call, index) => {
        call.then(
          (replies) => this.#confirmRetaken(index, items, replies, decisions),
          () => {},
        );
      });
    }
    return decisions;
  }

  /**
   * Marks plain again, in the background, the re-taken keys on node `index` of the leases this renewal confirmed:
   * from the re-take on they have been the leases' without a gap. Also for a node that answered after the round was
   * decided without it: a restarted node is often the slowest, and its key would stay marked for good, so that a
   * second restart lost a lease that had healed. Only a renewal that re-took or found a re-taken key sends anything. A
   * confirmation that does not land leaves the key marked: later renewals count it against the lease, never for it.
   */
  #confirmRetaken(
    index: number,
    items: readonly NodeRenew[],
    replies: readonly NodeRenewReply[],
    decisions: readonly RenewDecision[],
  ): void {
    const confirmed: NodeConfirm[] = [];
    replies.forEach((reply, i) => {
      const decision = decisions[i];
      if (reply === 'retaken' && decision !== UNDECIDED && decision?.renewed)
        confirmed.push(items[i] as NodeRenew);
    });
    if (confirmed.length > 0) this.#inBackground((node, s) => node.confirm(confirmed, s), index);
  }

  #round<T>(
    call: (node: RedlockNode, signal: AbortSignal, index: number) => Promise<T>,
    decided: (outcomes: readonly Outcome<T>[]) => boolean,
    signal?: AbortSignal,
  ): Promise<Outcome<T>[]> {
    return runRound<T>(this.#nodes.length, (i, s) => call(this.#nodes[i] as RedlockNode, s, i), {
      deadlines: this.#deadlines,
      decided,
      signal,
    });
  }

  /**
   * Undoes a claim that did not become a grant: owner-checked deletes on every node that did not refuse, including
   * those that failed or timed out (their claim may have landed). In the background; the TTL covers what it misses.
   *
   * A node that refused means rivals are claiming too; they find out for themselves and retry with jitter, and a
   * release notice would only wake them all at once into the next split (see {@link NodeRelease.notice}). With no
   * refusal, the claim may have landed everywhere and turned waiters away for a whole TTL: they are told.
   */
  #cleanup(
    name: string,
    ownershipToken: string,
    claims: readonly Outcome<NodeAcquireReply>[],
    expiresBy: number,
  ): void {
    const contended = claims.some(isRefusal);
    const request: NodeRelease = contended
      ? { name, ownershipToken, cleanup: true }
      : // Unique, so watchers do not drop it as a repeat of an earlier notice.
        { name, ownershipToken, cleanup: true, notice: `x${randomBytes(6).toString('hex')}` };
    claims.forEach((outcome, i) => {
      // A claim refused before it was sent never landed: nothing to undo, and no retries against a node that is down.
      if (
        isRefusal(outcome) ||
        (outcome.status === 'failed' && outcome.error instanceof NodeNotConnectedError)
      )
        return;
      this.#undo(i, request, expiresBy).catch(() => {});
    });
  }

  /**
   * One node's part of a clean-up, tried again while its call fails. A claim whose reply was lost with its
   * connection is undone while the client reconnects, and that try fails at once without reaching the node: the
   * claim would then hold the node for its whole TTL, and on a majority of nodes keep a free lock "busy". A call
   * that only timed out is not repeated: it was sent on the claim's connection and runs after the claim. Stops
   * once the claim has expired by itself (`expiresBy`, on the monotonic clock) or the service closes.
   */
  async #undo(index: number, request: NodeRelease, expiresBy: number): Promise<void> {
    const node = this.#nodes[index] as RedlockNode;
    const closing = this.#closing.signal;
    for (let pauseMs = UNDO_FIRST_PAUSE_MS; ; pauseMs = Math.min(2 * pauseMs, UNDO_MAX_PAUSE_MS)) {
      const [outcome] = await runRound<NodeReleaseReply>(1, (_, s) => node.release(request, s), {
        deadlines: this.#deadlines,
      });
      const leftMs = expiresBy - this.#clock.monotonic();
      if (outcome?.status !== 'failed' || leftMs <= 0 || closing.aborted) return;
      // Unref'd: an undo must not keep the process alive; the claim's TTL is the backstop.
      await this.#clock.sleep(Math.min(pauseMs, leftMs), closing, { unref: true });
    }
  }

  /** Owner-checked delete on every node, in the background (for grants that are lost or abandoned). */
  releaseInBackground(lease: Lease): void {
    const request = {
      name: lease.name,
      ownershipToken: lease.ownershipToken,
      notice: lease.fencingToken.toString(),
      cleanup: true,
    };
    for (let i = 0; i < this.#nodes.length; i++) {
      this.#inBackground((node, s) => node.release(request, s), i);
    }
  }

  #inBackground(call: (node: RedlockNode, signal: AbortSignal) => Promise<unknown>, index: number): void {
    runRound(1, (_, s) => call(this.#nodes[index] as RedlockNode, s), { deadlines: this.#deadlines }).catch(
      () => {},
    );
  }
}

function isRefusal(outcome: Outcome<NodeAcquireReply>): boolean {
  return outcome.status === 'ok' && !outcome.value.granted;
}

function countClaims(outcomes: readonly Outcome<NodeAcquireReply>[]): {
  granted: number;
  refused: number;
  pending: number;
} {
  let granted = 0;
  let refused = 0;
  let pending = 0;
  for (const o of outcomes) {
    if (o.status === 'pending') pending += 1;
    else if (o.status === 'ok') {
      if (o.value.granted) granted += 1;
      else refused += 1;
    }
  }
  return { granted, refused, pending };
}

/**
 * Nodes that told whether they deleted the lease's key, and those of them that did. A node that cannot tell (its
 * answer is `undefined`) counts as one that did not answer.
 */
function countDeletes(outcomes: readonly Outcome<boolean | undefined>[]): {
  answered: number;
  deleted: number;
} {
  let answered = 0;
  let deleted = 0;
  for (const o of outcomes) {
    if (o.status !== 'ok' || o.value === undefined) continue;
    answered += 1;
    if (o.value) deleted += 1;
  }
  return { answered, deleted };
}

/** Nodes that raised their counter from below the token to the token. */
function countConfirmed(outcomes: readonly Outcome<boolean>[]): number {
  let confirmed = 0;
  for (const o of outcomes) if (o.status === 'ok' && o.value) confirmed += 1;
  return confirmed;
}

/**
 * When the lock is likely to be claimable again: `needed` more nodes must become free, so the `needed`-th shortest
 * remaining TTL among the refusing nodes. Undefined when unknown.
 */
function holderExpiry(claims: readonly Outcome<NodeAcquireReply>[], needed: number): number | undefined {
  const ttls: number[] = [];
  for (const o of claims) {
    if (o.status === 'ok' && !o.value.granted && o.value.holderTtlMs > 0) ttls.push(o.value.holderTtlMs);
  }
  ttls.sort((a, b) => a - b);
  return ttls[Math.min(ttls.length, Math.max(1, needed)) - 1];
}

/**
 * Only `extended` is evidence of continuous ownership. `retaken` and `refused` are evidence against it; a node
 * that failed or did not answer is evidence of nothing.
 */
function decideRenewal(
  outcomes: readonly Outcome<readonly NodeRenewReply[]>[],
  index: number,
  n: number,
  q: number,
): RenewDecision {
  let extended = 0;
  let against = 0;
  for (const o of outcomes) {
    if (o.status !== 'ok') continue;
    if (o.value[index] === 'extended') extended += 1;
    else against += 1;
  }
  if (extended >= q) return { renewed: true };
  if (against > n - q) return { renewed: false };
  return UNDECIDED;
}

function firstError(outcomes: readonly Outcome<unknown>[]): unknown {
  for (const o of outcomes) if (o.status === 'failed') return o.error;
  return undefined;
}
