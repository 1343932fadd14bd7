/**
 * The arithmetic of leases, in one place so it can be tested on its own.
 * All times are milliseconds on the client's monotonic clock.
 */

/** Time reserved for clock-rate differences between client and service, plus 2 ms for timer granularity. */
export function driftMs(ttlMs: number, driftFactor: number): number {
  return ttlMs * driftFactor + 2;
}

/**
 * The end of a grant's usable window. Measured from `sentAt`, the moment *before* the request left: the service
 * started its TTL no earlier than that, so the window ends no later than the service's own expiry.
 */
export function validUntil(sentAt: number, ttlMs: number, driftFactor: number): number {
  return sentAt + ttlMs - driftMs(ttlMs, driftFactor);
}

/** Renew at about a third of the TTL, so one failed attempt still leaves time for another before expiry. */
export function renewIntervalMs(ttlMs: number): number {
  return ttlMs / 3;
}

/** ±10% jitter: handles acquired together (and clients started together) drift apart instead of renewing in step. */
export function jitter(ms: number, random: () => number): number {
  return ms * (0.9 + 0.2 * random());
}

/**
 * Full-jitter exponential backoff: uniformly random in [0, min(cap, base·2^attempt)). Spreads contenders out
 * better than equal or decorrelated jitter for the same load.
 */
export function fullJitterBackoff(
  attempt: number,
  baseMs: number,
  capMs: number,
  random: () => number,
): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(attempt, 30));
  return random() * ceiling;
}

/**
 * How close to the deadline a renewal may still be sent. A renewal that cannot complete before the deadline cannot
 * keep the lease, so below this margin the handle is declared Lost without asking the service.
 *
 * The margin is the slowest round trip seen recently (decaying, so one slow outlier does not stick), and at least
 * 1 ms. The design note's "within 2 × interval of expiry" rule is wrong: after a normal first tick at up to
 * 1.1·ttl/3 only about 0.63·ttl − drift remains, which is already less than 2·ttl/3, so every handle would be
 * declared Lost on its first renewal.
 */
export function renewMarginMs(rttEstimateMs: number): number {
  return Math.max(1, rttEstimateMs);
}

/** Folds a new round-trip sample into the estimate: jumps up at once, decays by half per sample. */
export function updateRttEstimate(previousMs: number, sampleMs: number): number {
  return Math.max(sampleMs, previousMs / 2);
}
