import { type Leader, type Leadership, LockClient, MemoryLockService } from '@dlock/core';
import { FakeClock, type FakeProcessClock, FaultyLockService, FencedStore } from '@dlock/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { propertyRuns, propertySeed } from './property-env.js';

/**
 * Elections under pauses, partitions and resigns: 2–4 candidates, each its own simulated process (own clock view,
 * own client, own link to one shared in-memory service), loop campaign → act as leader (fenced writes stamped with
 * the epoch) → resign, while the schedule pauses processes and partitions their links. An observer in a process of
 * its own follows the election. Everything runs on one FakeClock.
 */

const TTL = 300;
const STEP = 10;
const NAME = 'scheduler';
const RUNS = propertyRuns(150);
/**
 * Fixed, so the suite is deterministic: with a random seed, some sets of 150 schedules refuse no stale write (losses
 * are rare and not every one leads to a stale write), and the coverage check below failed now and then. Set
 * DLOCK_PROPERTY_SEED to explore other schedules.
 */
const SEED = propertySeed(20_261_202);

type Fault =
  | { kind: 'pause'; who: number; at: number; forMs: number }
  | { kind: 'partition'; who: number; at: number; forMs: number; mode: 'fail' | 'hang' };

interface Plan {
  candidates: { terms: number; actMs: number }[];
  faults: Fault[];
  seed: number;
}

const plan: fc.Arbitrary<Plan> = fc.record({
  candidates: fc.array(
    fc.record({ terms: fc.integer({ min: 1, max: 3 }), actMs: fc.integer({ min: 0, max: 600 }) }),
    {
      minLength: 2,
      maxLength: 4,
    },
  ),
  faults: fc.array(
    fc.oneof(
      fc.record({
        kind: fc.constant('pause' as const),
        who: fc.integer({ min: 0, max: 3 }),
        at: fc.integer({ min: 0, max: 2_000 }),
        forMs: fc.integer({ min: 50, max: 1_000 }),
      }),
      fc.record({
        kind: fc.constant('partition' as const),
        who: fc.integer({ min: 0, max: 3 }),
        at: fc.integer({ min: 0, max: 2_000 }),
        forMs: fc.integer({ min: 50, max: 1_000 }),
        mode: fc.constantFrom('fail' as const, 'hang' as const),
      }),
    ),
    { maxLength: 6 },
  ),
  seed: fc.integer({ min: 1, max: 1_000_000 }),
});

const totals = { terms: 0, staleRejected: 0, lost: 0, checks: 0 };

async function runPlan(p: Plan): Promise<void> {
  const clock = new FakeClock({ seed: p.seed });
  const service = new MemoryLockService({ clock });
  const store = new FencedStore<number>();
  const epochs: bigint[] = [];
  const procs = p.candidates.map((spec, id) => {
    const view: FakeProcessClock = clock.process();
    const link = new FaultyLockService(service, { clock: view });
    const client = new LockClient(link, {
      clock: view,
      operationTimeoutMs: 200,
      retry: { baseMs: 20, capMs: 200 },
    });
    return { id, spec, view, link, client, leadership: undefined as Leadership | undefined, done: false };
  });
  const run = async (proc: (typeof procs)[number]): Promise<void> => {
    const election = proc.client.election(NAME, { ttlMs: TTL });
    for (let term = 0; term < proc.spec.terms; term++) {
      let leadership: Leadership;
      try {
        leadership = await election.campaign({ value: `c${proc.id}`, waitMs: 3_000 });
      } catch {
        continue;
      }
      proc.leadership = leadership;
      epochs.push(leadership.epoch);
      totals.terms += 1;
      for (let t = 0; t < proc.spec.actMs; t += STEP) {
        // The leader's act: a write stamped with its epoch, which the store refuses once a newer epoch wrote.
        const result = store.write(NAME, leadership.epoch, proc.id);
        if (!result.accepted) totals.staleRejected += 1;
        await proc.view.sleep(STEP);
      }
      if (leadership.state === 'lost') totals.lost += 1;
      await leadership.resign().catch(() => {});
    }
    proc.done = true;
  };
  const observerClient = new LockClient(service, { clock, operationTimeoutMs: 200 });
  const stop = new AbortController();
  const observed: (Leader | null)[] = [];
  const observing = (async () => {
    for await (const leader of observerClient
      .election(NAME, { ttlMs: TTL })
      .observe({ signal: stop.signal })) {
      observed.push(leader);
    }
  })();
  const running = procs.map((proc) => run(proc));
  const faults = [...p.faults].filter((f) => f.who < procs.length).sort((a, b) => a.at - b.at);
  const ends: { at: number; undo: () => void }[] = [];
  for (let now = 0; now < 12_000 && procs.some((proc) => !proc.done); now += STEP) {
    for (const fault of faults.filter(
      (f) => f.at === now - (now % STEP) && f.at <= now && f.at > now - STEP,
    )) {
      const proc = procs[fault.who];
      if (!proc) continue;
      if (fault.kind === 'pause' && !proc.view.paused) {
        proc.view.pause();
        ends.push({ at: now + fault.forMs, undo: () => proc.view.resume() });
      } else if (fault.kind === 'partition') {
        proc.link.partition(fault.mode);
        ends.push({ at: now + fault.forMs, undo: () => proc.link.heal() });
      }
    }
    for (const end of ends.filter((e) => e.at <= now)) {
      end.undo();
      ends.splice(ends.indexOf(end), 1);
    }
    // At most one candidate believes it leads, among processes that are running (a paused one cannot act).
    const believers = procs.filter(
      (proc) => !proc.view.paused && proc.leadership?.state === 'leading' && proc.leadership.isLeader(),
    );
    totals.checks += 1;
    expect(believers.length).toBeLessThanOrEqual(1);
    await clock.advance(STEP);
  }
  for (const end of ends) end.undo();
  await clock.advance(5 * TTL);
  await Promise.all(running);
  stop.abort();
  await clock.advance(STEP);
  await observing;
  // Epochs only rise from one leader to the next, and the observer never saw one go back.
  for (let i = 1; i < epochs.length; i++)
    expect(epochs[i] as bigint).toBeGreaterThan(epochs[i - 1] as bigint);
  const seen = observed.filter((l): l is Leader => l !== null).map((l) => l.epoch);
  for (let i = 1; i < seen.length; i++)
    expect(seen[i] as bigint).toBeGreaterThanOrEqual(seen[i - 1] as bigint);
  // The store accepted writes in epoch order only.
  const accepted = store.accepted.map((w) => w.token);
  for (let i = 1; i < accepted.length; i++)
    expect(accepted[i] as bigint).toBeGreaterThanOrEqual(accepted[i - 1] as bigint);
  await Promise.all([...procs.map((proc) => proc.client.close()), observerClient.close()]);
}

describe('elections under pauses, partitions and resigns (property)', () => {
  it('at most one running leader believes it leads; epochs rise; observers and fenced writes never go back', async () => {
    await fc.assert(
      fc.asyncProperty(plan, async (p) => {
        await runPlan(p);
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // The schedules must really have produced elections, losses and stale writes, or the property says nothing.
    expect(totals.terms).toBeGreaterThan(RUNS);
    expect(totals.lost).toBeGreaterThan(0);
    expect(totals.staleRejected).toBeGreaterThan(0);
  }, 120_000);
});
