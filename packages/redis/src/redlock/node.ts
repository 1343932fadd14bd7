import { TransportError } from '@dlock/core';

/**
 * One Redlock node as the quorum algorithm sees it: four atomic operations on one independent Redis. The Redis
 * implementation is `RedisRedlockNode`; tests plug in-process models into the same algorithm.
 *
 * Every operation may reject (node down, reply lost). The algorithm bounds each call with its own deadline and
 * treats a rejection as "unknown": the operation may or may not have been applied.
 */
export interface RedlockNode {
  /** Round 1: claim `name` if free and report this node's fencing counter; or the holder's remaining TTL. */
  acquire(request: NodeAcquire, signal: AbortSignal): Promise<NodeAcquireReply>;
  /**
   * Round 2: true if this node still holds the grant's key and its counter was below `fencingToken` and is now
   * raised to it; false if the key is gone or the counter is already at or past the token.
   */
  mint(request: NodeMint, signal: AbortSignal): Promise<boolean>;
  /** Extends every lease still owned here; results in request order. */
  renew(requests: readonly NodeRenew[], signal: AbortSignal): Promise<readonly NodeRenewReply[]>;
  /** Owner-checked delete, announcing the release (see {@link NodeReleaseReply}). */
  release(request: NodeRelease, signal: AbortSignal): Promise<NodeReleaseReply>;
  /**
   * After a renewal a majority confirmed with `extended`: the keys this node answered `retaken` have been the leases'
   * since then, and later renewals may count them as `extended`.
   */
  confirm(requests: readonly NodeConfirm[], signal: AbortSignal): Promise<void>;
}

export interface NodeConfirm {
  readonly name: string;
  readonly ownershipToken: string;
}

export interface NodeAcquire {
  readonly name: string;
  readonly ownershipToken: string;
  readonly ttlMs: number;
}

export type NodeAcquireReply =
  | { readonly granted: true; readonly counter: bigint }
  /** `holderTtlMs` is the holder's remaining PTTL in ms; negative when unknown (no TTL, key gone). */
  | { readonly granted: false; readonly holderTtlMs: number };

export interface NodeMint {
  readonly name: string;
  readonly ownershipToken: string;
  readonly fencingToken: bigint;
}

export interface NodeRenew {
  readonly name: string;
  readonly ownershipToken: string;
  readonly fencingToken: bigint;
  readonly ttlMs: number;
}

/**
 * `extended`: the key was present and ours. `retaken`: it was gone and was set again, now or by an earlier renewal no
 * majority has confirmed since (evidence of a gap, never of continuous ownership). `missing`: it was gone and was left so. `refused`: another owner holds it.
 */
export type NodeRenewReply = 'extended' | 'retaken' | 'missing' | 'refused';

/**
 * `deleted`: the lease's key was deleted, and had been the lease's since its last confirmed renewal. `retaken`: a key
 * a renewal re-took and no majority confirmed since was deleted (that proves nothing). `absent`: no key. `other`:
 * another owner's key is there.
 */
export type NodeReleaseReply = 'deleted' | 'retaken' | 'absent' | 'other';

export interface NodeRelease {
  readonly name: string;
  readonly ownershipToken: string;
  /**
   * Published to watchers when the delete happens; the same notice from several nodes is delivered once. Omitted
   * when undoing a claim that lost to rivals' claims: they retry by themselves, and a notice would wake every
   * waiter at once, into the same split of the nodes that made this claim fail.
   */
  readonly notice?: string;
  /**
   * Set for a clean-up after an outcome that is not known: the delete must not depend on the node's script cache,
   * because the NOSCRIPT answer that would trigger a re-send can be lost just like the reply it follows.
   */
  readonly cleanup?: boolean;
}

/**
 * A node call refused before anything was sent (its client is not connected): unlike other failures, it is known
 * not to have been applied, so a claim that failed so needs no clean-up on that node.
 */
export class NodeNotConnectedError extends TransportError {}
