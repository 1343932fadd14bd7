// Measures the client's own overhead on the in-memory service (no network), on the built package:
//   (A) uncontended acquire + release, ops/s and p50/p99;
//   (B) N held locks with auto-renewal for a while: renewal batches per second, renewals per second, client CPU.
// Usage: node bench/core.mjs [--locks 1000,10000] [--seconds 10] [--ttl 3000]
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { LockClient, MemoryLockService } from '@dlock/core';

const { values: args } = parseArgs({
  options: { locks: { type: 'string' }, seconds: { type: 'string' }, ttl: { type: 'string' } },
});
const lockCounts = String(args.locks ?? '1000,10000')
  .split(',')
  .map(Number);
const seconds = Number(args.seconds ?? 10);
const ttlMs = Number(args.ttl ?? 3000);

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function uncontended(iterations) {
  const client = new LockClient(new MemoryLockService());
  const times = [];
  const start = performance.now();
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    const handle = await client.acquire('bench', { ttlMs: 10_000 });
    await handle.release();
    times.push(performance.now() - t0);
  }
  const elapsed = performance.now() - start;
  await client.close();
  times.sort((a, b) => a - b);
  return {
    opsPerSec: Math.round(iterations / (elapsed / 1000)),
    p50: percentile(times, 50),
    p99: percentile(times, 99),
  };
}

async function renewal(count) {
  const memory = new MemoryLockService();
  let batches = 0;
  let renewals = 0;
  const service = {
    acquire: (r) => memory.acquire(r),
    renew: (r) => {
      batches += 1;
      renewals += 1;
      return memory.renew(r);
    },
    renewMany: (requests) => {
      batches += 1;
      renewals += requests.length;
      return memory.renewMany(requests);
    },
    release: (l) => memory.release(l),
    watch: (n, cb) => memory.watch(n, cb),
  };
  const client = new LockClient(service);
  const handles = await Promise.all(
    Array.from({ length: count }, (_, i) => client.acquire(`lock-${i}`, { ttlMs })),
  );
  batches = 0;
  renewals = 0;
  const cpu0 = process.cpuUsage();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const cpu = process.cpuUsage(cpu0);
  const held = handles.filter((h) => h.isHeld()).length;
  await client.close();
  return {
    locks: count,
    held,
    batchesPerSec: +(batches / seconds).toFixed(1),
    renewalsPerSec: Math.round(renewals / seconds),
    cpuMsPer10s: Math.round(((cpu.user + cpu.system) / 1000) * (10 / seconds)),
  };
}

console.log(`node ${process.version}, ttl ${ttlMs} ms, ${seconds} s per renewal run`);
await uncontended(2_000); // warm-up
console.log('(A) uncontended acquire+release, in-memory:', await uncontended(20_000));
for (const count of lockCounts) console.log('(B) auto-renewal:', await renewal(count));
