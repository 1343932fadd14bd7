import { describe, expect, it } from 'vitest';
import {
  driftMs,
  fullJitterBackoff,
  jitter,
  renewIntervalMs,
  renewMarginMs,
  updateRttEstimate,
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

  it('uses the slowest recent round trip as the renewal margin, decaying, never below 1 ms', () => {
    expect(renewMarginMs(0)).toBe(1);
    expect(renewMarginMs(40)).toBe(40);
    expect(updateRttEstimate(10, 80)).toBe(80);
    expect(updateRttEstimate(80, 10)).toBe(40);
    expect(updateRttEstimate(40, 10)).toBe(20);
  });

  it('leaves room for a renewal at the latest jittered tick (the "2 × interval" rule would not)', () => {
    for (const ttl of [10, 100, 1_000, 30_000, 2 ** 31 - 1]) {
      const expiresAt = validUntil(0, ttl, 0.01);
      const latestTick = jitter(renewIntervalMs(ttl), () => 0.999999);
      // Our rule: Lost only if what is left cannot cover a round trip. With a fast service the margin is ~1 ms.
      expect(expiresAt - latestTick).toBeGreaterThan(renewMarginMs(0));
      // The design note's rule would declare every healthy handle Lost on its first tick.
      expect(latestTick > expiresAt - 2 * renewIntervalMs(ttl)).toBe(true);
    }
  });
});
