/**
 * The instrument and attribute names this package records, for dashboards and alerts. Duration metrics are in
 * seconds (span attributes say their unit in their name); counts are of holds (`{hold}`) or renewals.
 */
export const METRICS = {
  /** Histogram, seconds: from the acquire call to its end, by `dlock.outcome`. */
  acquireWait: 'dlock.acquire.wait',
  /** Histogram, seconds: from the grant to `release()` or to the loss being noticed, by `dlock.hold.end`. */
  holdDuration: 'dlock.hold.duration',
  /** Up-down counter: handles held right now by the instrumented clients. */
  held: 'dlock.held',
  /** Counter: handles lost, by `dlock.reason`. */
  losses: 'dlock.losses',
  /** Counter: renewals the service confirmed. */
  renewals: 'dlock.renewals',
  /** Counter: renewals that failed (each retry counts; the handle is lost when the budget or window runs out). */
  renewalFailures: 'dlock.renewal.failures',
} as const;

/**
 * The span names this package records. Each span is recorded when its call ends, timed from the event, and is a
 * child of the context active in the caller.
 */
export const SPANS = {
  /** One per acquire call that ended (granted or not), from the call to its end; status ERROR on `error`. */
  acquire: 'dlock.acquire',
  /** One per `release()`, for the time the release took; status ERROR when the service could not be told. */
  release: 'dlock.release',
} as const;

/** The attribute names on this package's metrics and spans; each entry says where it appears. */
export const ATTRIBUTES = {
  /** `lock` or `permit` (an election's leadership is a lock). */
  kind: 'dlock.kind',
  /** An acquire's outcome: `acquired`, `timeout`, `aborted` or `error`. */
  outcome: 'dlock.outcome',
  /** Why a handle was lost (`expired`, `unreachable`, `rejected`), or why a budget ran out (acquire spans). */
  reason: 'dlock.reason',
  /**
   * How a hold ended: `released`, `lost`, or `unknown` (`close()`'s retried release found nothing after a try that
   * went unanswered: that try may have deleted the lock, or the lock was taken before it; or a release result core
   * never sends, from a stream other than core's).
   */
  holdEnd: 'dlock.hold.end',
  /** The lock's (or semaphore's) name as `nameAttribute` mapped it; absent unless that option is given. */
  name: 'dlock.name',
  /** A permit's slot; only beside `dlock.name`. */
  slot: 'dlock.slot',
  /** Spans: the fencing token, as a decimal string (tokens are 64-bit and outgrow a double). */
  fencingToken: 'dlock.fencing_token',
  /** Spans: ms the acquire waited. */
  waitMs: 'dlock.wait_ms',
  /** Spans: requests the acquire sent to the service. */
  attempts: 'dlock.attempts',
  /** Acquire spans: the already-held handle was returned (reentrancy). */
  reentered: 'dlock.reentered',
  /** Acquire spans: the TTL the service granted, ms. */
  ttlMs: 'dlock.ttl_ms',
  /** Release spans: ms the handle was held. */
  heldMs: 'dlock.held_ms',
  /** Release spans: `deleted`, `not-found` (the lock had been taken from it) or `failed` (service not told). */
  releaseResult: 'dlock.release.result',
} as const;
