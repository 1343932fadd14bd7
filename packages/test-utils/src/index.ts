import { randomBytes } from 'node:crypto';
import pg from 'pg';

import { PG_URL } from './servers/defaults.js';

export { type ChildRun, type RunBuiltPackageOptions, runBuiltPackage } from './built-package.js';
export * from './semaphore-history.js';
export * from './semaphore-soak.js';
export { ETCD_ENDPOINT, MYSQL_URL, PG_URL, REDIS_URL, ZK_CONNECT } from './servers/defaults.js';
export * from './servers/etcd.js';
export {
  freePort,
  portOpen,
  type ServerProcess,
  type StartProcessOptions,
  startProcess,
  tempDir,
} from './servers/process.js';
export * from './servers/redis.js';
export * from './servers/redis-cluster.js';
export { type ProxyMode, startTcpProxy, type TcpProxy } from './servers/tcp-proxy.js';
export * from './servers/zookeeper.js';

/** A table (or key) name no other run or file uses, so suites never collide and can drop what they made. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Fisher–Yates with Math.random: race tests want a new order each round, not a reproducible one. */
export function shuffle<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

export function isNonDecreasing(values: readonly bigint[]): boolean {
  return values.every((value, i) => i === 0 || (values[i - 1] as bigint) <= value);
}

/** Largest of some bigints, or undefined for none (Math.max does not take bigints). */
export function maxOf(values: Iterable<bigint | undefined>): bigint | undefined {
  let max: bigint | undefined;
  for (const value of values) {
    if (value !== undefined && (max === undefined || value > max)) max = value;
  }
  return max;
}

/** The rejection reason of a promise that must reject; fails if it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

/**
 * Race suites open about 50 PostgreSQL connections each; the server allows 100 in all. Holding this session-level
 * advisory lock while racing makes suites of different packages take turns when they run at the same time.
 * Returns the function that ends the session and so frees the slot.
 */
export async function takeRaceSlot(): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: PG_URL });
  client.on('error', () => {});
  await client.connect();
  await client.query('SELECT pg_advisory_lock(7307264001)');
  return () => client.end();
}

/** Latencies (µs) of one block of calls, and the block's wall time (s). */
export interface Samples {
  readonly samples: Float64Array;
  readonly totalS: number;
}

/** Runs `fn(0..count-1)` one after another, timing each call. */
export async function measure(fn: (i: number) => Promise<unknown>, count: number): Promise<Samples> {
  const samples = new Float64Array(count);
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    await fn(i);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1e3;
  }
  return { samples, totalS: Number(process.hrtime.bigint() - start) / 1e9 };
}

export interface Summary {
  readonly ops: number;
  readonly p50: number;
  readonly p99: number;
}

export function summarize(runs: readonly Samples[]): Summary {
  const all = Float64Array.from(runs.flatMap((r) => [...r.samples])).sort();
  const total = runs.reduce((s, r) => s + r.totalS, 0);
  const pct = (p: number) => all[Math.min(all.length - 1, Math.floor(p * all.length))] ?? Number.NaN;
  return { ops: all.length / total, p50: pct(0.5), p99: pct(0.99) };
}

/**
 * Times a baseline against a variant: a warm-up of each, then alternating blocks of `block` calls until `n` of each
 * ran, so drift (autovacuum, page cache, the other core's load) hits both alike.
 */
export async function compareAlternating(
  baseline: (i: number) => Promise<unknown>,
  variant: (i: number) => Promise<unknown>,
  n: number,
  { warmup = 200, block = 500 }: { warmup?: number; block?: number } = {},
): Promise<{ baseline: Summary; variant: Summary }> {
  await measure(baseline, warmup);
  await measure(variant, warmup);
  const runs: { baseline: Samples[]; variant: Samples[] } = { baseline: [], variant: [] };
  for (let done = 0; done < n; done += block) {
    const size = Math.min(block, n - done);
    runs.baseline.push(await measure(baseline, size));
    runs.variant.push(await measure(variant, size));
  }
  return { baseline: summarize(runs.baseline), variant: summarize(runs.variant) };
}

/** One aligned result line: name, ops/s, p50 and p99 in µs. */
export function formatRow(name: string, s: Summary, width = 22): string {
  return `${name.padEnd(width)} ${s.ops.toFixed(0).padStart(7)} ops/s   p50 ${s.p50.toFixed(0).padStart(5)} µs   p99 ${s.p99.toFixed(0).padStart(5)} µs`;
}

/** How much slower `variant` is than `baseline`: added p50 latency and the throughput change. */
export function formatOverhead(baseline: Summary, variant: Summary): string {
  const pct = (x: number) => `${(x * 100).toFixed(0)}%`;
  return `overhead: p50 +${(variant.p50 - baseline.p50).toFixed(0)} µs (${pct(variant.p50 / baseline.p50 - 1)}), throughput ${pct(variant.ops / baseline.ops - 1)}`;
}
