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
 * A grant is handed out only if one renewal round trip still fits in what is left of its window: a handle that
 * could not be renewed even once before its window closes would be lost as soon as it is held. At least 1 ms.
 *
 * This margin is for admission only. A held handle stays held until its window actually closes, also while a
 * renewal is in flight: declaring it lost a round trip early would make every lock unkeepable once the round trip
 * exceeds about a third of the TTL, the point where renewals sent at ttl/3 come back.
 */
export function admissionMarginMs(roundTripMs: number): number {
  return Math.max(1, roundTripMs);
}

/**
 * How long after a renewal that failed with a transport error to try again: a third of what is left of the window,
 * so that several tries fit before it closes and a short outage (a reset connection, a reconnect) is ridden out;
 * never later than half a renewal interval; never sooner than 5 ms, since a refused connection fails in
 * microseconds and a tighter loop would only burn CPU.
 */
export function renewRetryDelayMs(ttlMs: number, remainingMs: number): number {
  return Math.max(5, Math.min(renewIntervalMs(ttlMs) / 2, remainingMs / 3));
}
