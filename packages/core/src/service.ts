/**
 * The backend seam. An adapter answers four questions — take the lock, extend my claim, drop my claim, tell me when
 * it is free — and core does everything else: validity math, bounded waits, retries, renewal scheduling, reentrancy
 * and loss detection. Adapters throw on transport failures (core turns anything thrown into a `TransportError`)
 * and return a negative answer when the service said no.
 */

/** A lock granted by the service. */
export interface Grant {
  /** Random per grant; proves ownership to `renew`/`release`. Has no order: never use it for fencing. */
  readonly ownershipToken: string;
  /** Minted by the service, strictly increasing per lock name across grants. Storage compares these. */
  readonly fencingToken: bigint;
  /** The TTL the service actually granted (it may round up), which core's validity math uses. */
  readonly ttlMs: number;
  /**
   * For a service that queues inside `acquire`: how long after the call began it sent the request that started this
   * grant's TTL (the winning write, or a lease refresh after a long wait), by its own monotonic clock. Core anchors
   * the validity window that much later than the call's send time; without it, a grant that waited in a queue longer
   * than its TTL would look expired on arrival. Measure from entry into `acquire` to the send, never more.
   */
  readonly queuedMs?: number;
  /**
   * For an acquire that made several requests (a lease grant, then the write that won): the round trip of the last
   * one, in ms. Core hands a grant out only if one renewal round trip still fits in its window; without this field
   * it takes the whole time since the validity anchor as that round trip, which counts every request twice.
   */
  readonly roundTripMs?: number;
  /** For a permit of a semaphore (`acquirePermit`): the slot it holds, `0 … permits − 1`. Absent for a lock. */
  readonly slot?: number;
}

/**
 * What core needs to name one grant in `renew` and `release`. With `slot` set it names a semaphore's permit: slot
 * `slot` of the semaphore `name`, which lives apart from any lock of the same name.
 */
export interface Lease {
  /** The lock's name; for a permit, the semaphore's. */
  readonly name: string;
  /** The `ownerId` of the client that acquired it. */
  readonly ownerId: string;
  /** The grant's `ownershipToken`: the service renews and releases only the grant that carries it. */
  readonly ownershipToken: string;
  /** For a permit: strictly increasing per slot (`name#slot`) across successive holders. */
  readonly fencingToken: bigint;
  /** Set for a semaphore's permit only. */
  readonly slot?: number;
}

/** One attempt to take a lock, as core hands it to {@link LockService.acquire}; every field is already validated. */
export interface AcquireRequest {
  /** The lock's name, or a permit's semaphore (at most {@link MAX_NAME_BYTES} UTF-8 bytes; the service encodes it). */
  readonly name: string;
  /** Identifies the client (`host:pid:random`); informational, ownership is proven by the ownership token. */
  readonly ownerId: string;
  /** The lease to grant, in ms (an integer from {@link MIN_TTL_MS} to 2^31−1); the service may round it up. */
  readonly ttlMs: number;
  /**
   * How long the caller is still willing to wait, in ms. A service that queues waiters on the server (etcd,
   * ZooKeeper) may wait up to this long before answering; a service that cannot queue answers at once and core
   * retries. `0` means one attempt, no queueing.
   */
  readonly waitMs: number;
  /** Aborts when the caller gives up (abort, close or core's own bound). A queued waiter must then leave the queue. */
  readonly signal: AbortSignal;
  /**
   * A small string stored with the grant (at most {@link MAX_METADATA_BYTES} UTF-8 bytes, validated by core) and
   * returned by `inspect`: what an election's leader proclaims, or who holds a lock (host:pid:job). Only services
   * that implement `inspect` are given one.
   */
  readonly metadata?: string;
}

/**
 * One attempt to take a permit of the semaphore `name`, which admits at most `permits` holders at once. `ttlMs`,
 * `waitMs`, `signal` and `metadata` mean what they mean for a lock.
 */
export interface PermitRequest extends AcquireRequest {
  /** The limit, 1 … {@link MAX_PERMITS}; the service stores it with every holder and waiter. */
  readonly permits: number;
}

/** The largest `permits` a semaphore may have. */
export const MAX_PERMITS = 10_000;

/** The largest metadata core passes to a service, in UTF-8 bytes. */
export const MAX_METADATA_BYTES = 1_024;

/** A lock as the service sees it right now. */
export interface LockInfo {
  /** Someone holds a lease on it that the service has not seen run out. */
  readonly held: boolean;
  /** The holder's `AcquireRequest.ownerId` (a client's `host:pid:random`), stored with its grant. */
  readonly ownerId?: string;
  /** The holder's fencing token (an election's epoch). */
  readonly fencingToken?: bigint;
  /** What the holder stored with its grant, or set since with `updateMetadata`. */
  readonly metadata?: string;
  /** How long the holder's lease has left by the service's clock, when it knows. */
  readonly expiresInMs?: number;
  /** How many callers queue for it, when the service queues. */
  readonly waiters?: number;
}

/** One open permit of a semaphore, as the service sees it right now. */
export interface PermitHolder {
  /** The slot it holds, `0 … permits − 1`. */
  readonly slot: number;
  /**
   * The holder's `PermitRequest.ownerId`, stored with its grant; `''` where the slot is taken by something that is not
   * one of the service's permit records (no client can take the slot, and no client has that owner id).
   */
  readonly ownerId: string;
  /** Strictly increasing per slot across holders. */
  readonly fencingToken: bigint;
  /**
   * How long its lease has left by the service's clock, when the service knows (a ZooKeeper permit lives as long as
   * its holder's session, whose remaining time no other client can see).
   */
  readonly expiresInMs?: number;
  /** What the holder stored with its grant (`PermitRequest.metadata`). */
  readonly metadata?: string;
}

/** A semaphore as the service sees it right now. */
export interface PermitsInfo {
  /** The limit (the one asked about: a semaphore in use with another limit throws `PermitsMismatchError`). */
  readonly permits: number;
  /** The open permits, by slot. */
  readonly held: readonly PermitHolder[];
  /** How many callers queue for a permit, when the service knows. */
  readonly waiters?: number;
}

/** The answer to an acquire: a grant, or a refusal when someone else holds the lock (or every permit). */
export type AcquireResult =
  | {
      /** Granted. */
      readonly acquired: true;
      /** What the service granted. */
      readonly grant: Grant;
    }
  | {
      /** Not granted: the lock (or every permit) stayed taken for as long as the service waited. */
      readonly acquired: false;
      /** When the current holder's lease runs out, if the service knows: waiters can sleep until then. */
      readonly holderExpiresInMs?: number;
    };

/** One lease to extend. */
export interface RenewRequest {
  /** The grant to extend, checked by its `ownershipToken` on the service. */
  readonly lease: Lease;
  /** The lease's TTL in ms, counted again from when the service renews it. */
  readonly ttlMs: number;
}

/** The answer to a renewal: extended, or refused because the grant no longer owns the lock. */
export type RenewResult =
  | {
      /** Extended. */
      readonly renewed: true;
      /** The TTL actually granted, when it differs from the one requested. */
      readonly ttlMs?: number;
    }
  | {
      /** Refused: the lease is gone or belongs to another grant. Core makes the handle lost (`rejected`). */
      readonly renewed: false;
    };

/**
 * What a backend implements for {@link LockClient}: the service's atomic operations, renew and release checked on
 * the server against the grant's ownership token. Methods throw on transport failures and answer a refusal with a
 * negative result; core bounds every call by `operationTimeoutMs` and does the waiting, renewing and loss detection.
 */
export interface LockService {
  /**
   * Takes the lock `request.name` for `request.ttlMs` if it is free, with a fencing token higher than any granted
   * for that name before. A service that queues may wait up to `request.waitMs` and must leave its queue when
   * `request.signal` aborts; one that cannot answers at once, with `holderExpiresInMs` when it knows.
   */
  acquire(request: AcquireRequest): Promise<AcquireResult>;
  /** Extends the lease if, and only if, `lease.ownershipToken` still owns it (compared on the server). */
  renew(request: RenewRequest): Promise<RenewResult>;
  /**
   * Renews many leases in one round trip (a pipeline, one shared session keep-alive). Results are in request order.
   * Throwing fails the whole batch as a transport error. Core prefers this over `renew` whenever renewals coalesce.
   */
  renewMany?(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]>;
  /** Deletes the lock if, and only if, `lease.ownershipToken` still owns it. Resolves whether something was deleted. */
  release(lease: Lease): Promise<boolean>;
  /**
   * Calls `onReleased` when the lock named `name` may have become free (release or expiry), so waiters need not poll.
   * Best effort: core never relies on it alone. Returns an unsubscribe function.
   *
   * Core subscribes after a refused attempt, so a release can slip in before the subscription is live. A service
   * whose subscription becomes active asynchronously should either call `onReleased` once when it does (core then
   * simply tries again) or start the subscription from a point before the refusal (an etcd revision).
   */
  watch(name: string, onReleased: () => void): () => void;
  /**
   * Optional: lets a service report grants it knows are gone without waiting for their next renewal — every lock
   * of a ZooKeeper session when the session expires, every lock on an etcd lease that was revoked. `onLost`
   * receives the ownership tokens of the lost grants; core moves the matching handles to Lost at once.
   * Returns an unsubscribe function.
   */
  watchLeases?(onLost: (ownershipTokens: readonly string[]) => void): () => void;
  /**
   * Optional, needed for elections and `LockClient.inspect`: the current holder of `name`, read from the service (not
   * from any cache), with the owner id and metadata stored with its grant and, where the service queues, the number
   * of waiters.
   */
  inspect?(name: string): Promise<LockInfo>;
  /**
   * Optional, needed for elections (`proclaim`): replaces the metadata of the grant `lease` if, and only if, it still
   * holds the lock (compared on the server, like renew). Keeps the lease's fencing token and expiry.
   */
  updateMetadata?(lease: Lease, metadata: string): Promise<boolean>;
  /**
   * Optional: calls `onChange` when the holder of `name` or its metadata may have changed (a grant, a release, an
   * expiry the service noticed, an `updateMetadata`), so observers need not poll. Best effort, like `watch`: core
   * reads `inspect` after each call and also looks again on its own at least once per lease. A service whose
   * subscription becomes active asynchronously should call `onChange` once when it does. Returns an unsubscribe.
   */
  watchChanges?(name: string, onChange: () => void): () => void;
  /**
   * Optional, needed for semaphores: takes a free slot of the semaphore `request.name` for `request.ttlMs` and answers
   * with a grant whose `slot` is set and whose fencing token is strictly increasing per slot (from the same
   * restart-safe source as lock tokens). Never more than `permits` leases of one semaphore may be open at once.
   *
   * Waiters queue on the service in arrival order (by the service's order, never by client clocks) for up to
   * `waitMs`, and a release wakes the first waiter only; `waitMs: 0` takes a slot only if one is free and nobody
   * queues, and never queues. Leaving (deadline, abort) removes the attempt's queue entry, as for locks; core's
   * `acquireInQueue` gives all of this for a `QueueDriver` (both in `@dlock/core/adapter`).
   *
   * Renew, `renewMany` and `release` take the permit's lease (`slot` set). Throws `PermitsMismatchError` when holders
   * or waiters of the semaphore were admitted with another `permits`.
   */
  acquirePermit?(request: PermitRequest): Promise<AcquireResult>;
  /**
   * Optional, with `acquirePermit`: how many of the semaphore's `permits` slots no open lease holds right now, read
   * from the service. Throws `PermitsMismatchError` like `acquirePermit`.
   */
  availablePermits?(name: string, permits: number): Promise<number>;
  /**
   * Optional, for `Semaphore.inspect` and permit metadata: the open permits of the semaphore `name` (slot, owner id,
   * fencing token, time left, metadata), by slot, and how many wait, read from the service. A semaphore nobody uses
   * answers with no holders for any `permits`; one in use with another limit throws `PermitsMismatchError`, like
   * `availablePermits`.
   */
  inspectPermits?(name: string, permits: number): Promise<PermitsInfo>;
}

/**
 * @internal Wraps what a service's `watch`, `watchLeases` or `watchChanges` returned so that calling it never
 * throws: a subscription is best effort, and an unsubscribe that fails (a connection already gone) must not decide
 * how an acquire, an observer or `close()` ends. Something that is not a function becomes a no-op.
 */
export function quietUnsubscribe(unsubscribe: unknown): () => void {
  if (typeof unsubscribe !== 'function') return () => {};
  return () => {
    try {
      unsubscribe();
    } catch {
      // Nothing to do: the service drops the subscription with its connection, and notices are only hints.
    }
  };
}
