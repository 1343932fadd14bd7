/**
 * Small statistics helpers shared by every backend suite.
 *
 *   percentile(sorted, p)   nearest-rank percentile of an ascending array (p in 0..100); NaN when empty
 *   summarize(values)       { count, min, p50, p90, p99, max, mean } of any numeric array (not mutated)
 *   cpuSeconds(since)       user+system CPU of this process since a `process.cpuUsage()` snapshot, in seconds
 *   ratio(value, base)      value / base, or NaN when either is missing or base is 0
 */

export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

export function summarize(values) {
  const sorted = Float64Array.from(values).sort();
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: sorted.length,
    min: sorted.length ? sorted[0] : Number.NaN,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
    mean: sorted.length ? sum / sorted.length : Number.NaN,
  };
}

export function cpuSeconds(since) {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1e6;
}

export function ratio(value, base) {
  if (typeof value !== 'number' || typeof base !== 'number' || !Number.isFinite(base) || base === 0) {
    return Number.NaN;
  }
  return value / base;
}
