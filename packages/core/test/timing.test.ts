import { describe, expect, it } from 'vitest';
import {
  admissionMarginMs,
  driftMs,
  fullJitterBackoff,
  jitter,
  renewIntervalMs,
  renewRetryDelayMs,
  validUntil,
} from '../src/timing.js';

describe('validity math', () => {
  it('deducts TTL × driftFactor + 2 ms from a window measured from the send time', () => {
    expect(driftMs(10_000, 0.01)).toBe(102);
    expect(validUntil(5_000, 10_000, 0.01)).toBe(5_000 + 10_000 - 102);
    expect(validUntil(0, 10, 0)).toBe(8);
  });

  it('renews at a third of the TTL with ±10% jitter', () => {
    expect(renewIntervalMs(3_000)).toBe(1_000);
    expect(jitter(1_000, () => 0)).toBe(900);
    expect(jitter(1_000, () => 0.999999)).toBeCloseTo(1_100, 3);
  });

  it('keeps full-jitter backoff within [0, min(cap, base·2^attempt))', () => {
    expect(fullJitterBackoff(0, 50, 1000, () => 0.999)).toBeCloseTo(49.95, 5);
    expect(fullJitterBackoff(3, 50, 1000, () => 0.5)).toBe(200);
    expect(fullJitterBackoff(10, 50, 1000, () => 0.5)).toBe(500);
    expect(fullJitterBackoff(5_000, 50, 1000, () => 0.999)).toBeLessThan(1000);
    expect(fullJitterBackoff(2, 50, 1000, () => 0)).toBe(0);
  });

  it('admits a grant only if one round trip fits in its window, never with less than 1 ms', () => {
    expect(admissionMarginMs(0)).toBe(1);
    expect(admissionMarginMs(40)).toBe(40);
  });

  it('retries a failed renewal after a third of what is left, within [5 ms, interval / 2]', () => {
    // TTL 1 s: interval 333 ms. Plenty left: half an interval. Little left: a third of it. Almost none: 5 ms.
    expect(renewRetryDelayMs(1_000, 900)).toBeCloseTo(1_000 / 6, 6);
    expect(renewRetryDelayMs(1_000, 300)).toBe(100);
    expect(renewRetryDelayMs(1_000, 6)).toBe(5);
    // A 200 ms outage starting at the first renewal (~333 ms) of a 1 s lease is ridden out: the tries land at
    // 333 + 167 = 500 (still down) and 500 + (988 − 500) / 3 ≈ 663 (up again), before the window closes at 988.
    const closesAt = validUntil(0, 1_000, 0.01);
    let at = 333;
    const tries = [at];
    while (at < 533) {
      at += renewRetryDelayMs(1_000, closesAt - at);
      tries.push(at);
    }
    expect(tries.at(-1)).toBeLessThan(closesAt);
  });

  it('leaves room for a renewal at the latest jittered tick (the "2 × interval" rule would not)', () => {
    for (const ttl of [10, 100, 1_000, 30_000, 2 ** 31 - 1]) {
      const expiresAt = validUntil(0, ttl, 0.01);
      const latestTick = jitter(renewIntervalMs(ttl), () => 0.999999);
      // Our rule: Lost only when the window closes; a renewal sent at the latest tick has almost 2/3 of it left.
      expect(expiresAt - latestTick).toBeGreaterThan(admissionMarginMs(0));
      // The design note's rule would declare every healthy handle Lost on its first tick.
      expect(latestTick > expiresAt - 2 * renewIntervalMs(ttl)).toBe(true);
    }
  });
});
