import { LockClient, MemoryLockService, type Permit } from '@dlock/core';
import { FakeClock, type FakeProcessClock, FaultyLockService, FencedStore } from '@dlock/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { propertyRuns, propertySeed } from './property-env.js';

/**
 * Semaphores under pauses and partitions: 2–6 workers, each its own simulated process (own clock view, own client, own
 * link to one shared in-memory service), loop acquire → work on the slot's resource (fenced writes stamped with the
 * permit's token) → release, while the schedule pauses processes and partitions their links. Everything runs on one
 * FakeClock, so every interleaving is reproducible from its seed.
 */

const TTL = 300;
const STEP = 10;
const NAME = 'pool';
const RUNS = propertyRuns(120);
/**
 * Fixed, so the suite is deterministic: with a random seed each run tried other schedules, and the coverage checks
 * below (losses, refused stale writes) could fail on a set that happened to produce none. Set DLOCK_PROPERTY_SEED to
 * explore other schedules.
 */
const SEED = propertySeed(20_261_202);

type Fault =
  | { kind: 'pause'; who: number; at: number; forMs: number }
  | { kind: 'partition'; who: number; at: number; forMs: number; mode: 'fail' | 'hang' };

interface Plan {
  permits: number;
  workers: { holds: number; workMs: number; waitMs: number }[];
  faults: Fault[];
  seed: number;
}

const fault = (kind: 'pause' | 'partition') =>
  fc
    .record({
      who: fc.integer({ min: 0, max: 5 }),
      at: fc.integer({ min: 0, max: 2_000 }),
      forMs: fc.integer({ min: 50, max: 1_000 }),
      mode: fc.constantFrom('fail' as const, 'hang' as const),
    })
    .map((f): Fault => (kind === 'pause' ? { kind, who: f.who, at: f.at, forMs: f.forMs } : { kind, ...f }));

const plan: fc.Arbitrary<Plan> = fc.record({
  permits: fc.integer({ min: 1, max: 3 }),
  workers: fc.array(
    fc.record({
      holds: fc.integer({ min: 1, max: 4 }),
      workMs: fc.integer({ min: 0, max: 500 }),
      waitMs: fc.constantFrom(0, 200, 2_000),
    }),
    { minLength: 2, maxLength: 6 },
  ),
  faults: fc.array(fc.oneof(fault('pause'), fault('partition')), { maxLength: 6 }),
  seed: fc.integer({ min: 1, max: 1_000_000 }),
});

const totals = { holds: 0, lost: 0, staleRejected: 0, checks: 0, fullChecks: 0 };

async function runPlan(p: Plan): Promise<void> {
  const clock = new FakeClock({ seed: p.seed });
  const service = new MemoryLockService({ clock });
  const store = new FencedStore<number>();
  /** Tokens per slot in the order the permits were granted. */
  const tokens = new Map<number, bigint[]>();
  const procs = p.workers.map((spec, id) => {
    const view: FakeProcessClock = clock.process();
    const link = new FaultyLockService(service, { clock: view });
    const client = new LockClient(link, {
      clock: view,
      operationTimeoutMs: 200,
      retry: { baseMs: 20, capMs: 200 },
    });
    return { id, spec, view, link, client, permit: undefined as Permit | undefined, done: false };
  });
  const run = async (proc: (typeof procs)[number]): Promise<void> => {
    const pool = proc.client.semaphore(NAME, { permits: p.permits, ttlMs: TTL });
    for (let hold = 0; hold < proc.spec.holds; hold++) {
      let permit: Permit;
      try {
        permit = await pool.acquire({ waitMs: proc.spec.waitMs });
      } catch {
        continue;
      }
      proc.permit = permit;
      totals.holds += 1;
      const seen = tokens.get(permit.slot) ?? [];
      seen.push(permit.fencingToken);
      tokens.set(permit.slot, seen);
      for (let t = 0; t < proc.spec.workMs; t += STEP) {
        // The work: a write to this slot's resource, refused once a later holder of the slot has written.
        if (!store.write(permit.resource, permit.fencingToken, proc.id).accepted) totals.staleRejected += 1;
        await proc.view.sleep(STEP);
      }
      if (permit.state === 'lost') totals.lost += 1;
      await permit.release().catch(() => {});
      proc.permit = undefined;
    }
    proc.done = true;
  };
  const running = procs.map((proc) => run(proc));
  const faults = p.faults.filter((f) => f.who < procs.length).sort((a, b) => a.at - b.at);
  const ends: { at: number; undo: () => void }[] = [];
  for (let now = 0; now < 15_000 && procs.some((proc) => !proc.done); now += STEP) {
    for (const f of faults.filter((x) => x.at <= now && x.at > now - STEP)) {
      const proc = procs[f.who];
      if (!proc) continue;
      if (f.kind === 'pause' && !proc.view.paused) {
        proc.view.pause();
        ends.push({ at: now + f.forMs, undo: () => proc.view.resume() });
      } else if (f.kind === 'partition') {
        proc.link.partition(f.mode);
        ends.push({ at: now + f.forMs, undo: () => proc.link.heal() });
      }
    }
    for (const end of ends.filter((e) => e.at <= now)) {
      end.undo();
      ends.splice(ends.indexOf(end), 1);
    }
    // Among running processes (a paused one cannot act), at most `permits` believe they hold a permit, never two
    // the same slot.
    const believers = procs.filter((proc) => !proc.view.paused && proc.permit?.isHeld());
    const slots = believers.map((proc) => proc.permit?.slot);
    totals.checks += 1;
    if (believers.length === p.permits) totals.fullChecks += 1;
    expect(believers.length).toBeLessThanOrEqual(p.permits);
    expect(new Set(slots).size).toBe(slots.length);
    await clock.advance(STEP);
  }
  for (const end of ends) end.undo();
  await clock.advance(5 * TTL);
  await Promise.all(running);
  // Each slot's tokens rise from one holder to the next, and its resource accepted writes in token order only.
  for (const [slot, seen] of tokens) {
    expect(slot).toBeGreaterThanOrEqual(0);
    expect(slot).toBeLessThan(p.permits);
    for (let i = 1; i < seen.length; i++) expect(seen[i] as bigint).toBeGreaterThan(seen[i - 1] as bigint);
  }
  const byResource = new Map<string, bigint[]>();
  for (const write of store.accepted) {
    const list = byResource.get(write.resource) ?? [];
    list.push(write.token);
    byResource.set(write.resource, list);
  }
  for (const list of byResource.values()) {
    for (let i = 1; i < list.length; i++)
      expect(list[i] as bigint).toBeGreaterThanOrEqual(list[i - 1] as bigint);
  }
  await Promise.all(procs.map((proc) => proc.client.close()));
  // Nothing is left behind: every permit came back and nobody is queued.
  await clock.advance(2 * TTL);
  const after = new LockClient(service, { clock });
  expect(await after.semaphore(NAME, { permits: p.permits, ttlMs: TTL }).available()).toBe(p.permits);
  await after.close();
}

describe('semaphores under pauses and partitions (property)', () => {
  it('at most `permits` running holders, one per slot; per-slot tokens rise; nothing is left behind', async () => {
    await fc.assert(
      fc.asyncProperty(plan, async (p) => {
        await runPlan(p);
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // The schedules must really have filled the semaphore, lost permits and refused stale writes.
    expect(totals.holds).toBeGreaterThan(RUNS * 2);
    expect(totals.fullChecks).toBeGreaterThan(0);
    expect(totals.lost).toBeGreaterThan(0);
    expect(totals.staleRejected).toBeGreaterThan(0);
    console.log(`property totals over ${RUNS} runs: ${JSON.stringify(totals)}`);
  }, 120_000);
});
