import { LockClient, type LockHandle, MemoryLockService } from '@dlock/core';
import { FakeClock, type FakeProcessClock, FaultyLockService, FencedStore } from '@dlock/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { propertyRuns, propertySeed } from './property-env.js';

/**
 * Jepsen in miniature: 2–8 workers, each its own "process" (own clock view, own client, own link to the shared
 * service), loop acquire → work → write through a fenced store → release, while the schedule pauses processes,
 * partitions their links and steps wall clocks. Everything runs on one FakeClock: no real time passes.
 */

const TTL = 300;
const OP_TIMEOUT = 200;
const STEP = 10;
const NAME = 'account';
const RUNS = propertyRuns(500);
/**
 * Fixed, so the suite is deterministic: with a random seed each run tried other schedules, and the coverage checks
 * below (losses, refused stale writes) could fail on a set that happened to produce none. Set DLOCK_PROPERTY_SEED to
 * explore other schedules.
 */
const SEED = propertySeed(20_261_202);

type Fault =
  | { kind: 'pause'; worker: number; at: number; forMs: number }
  | { kind: 'partition'; worker: number; at: number; forMs: number; mode: 'fail' | 'hang' }
  | { kind: 'wall-step'; worker: number; at: number; byMs: number };

interface Plan {
  workers: { iterations: number; holdMs: number[]; waitMs: number }[];
  faults: Fault[];
  seed: number;
}

interface Window {
  worker: number;
  handle: LockHandle;
  start: number;
  end?: number;
}

/** Totals over all runs, so the suite can show that its schedules really produced stale writes and losses. */
const totals = { grants: 0, staleWritesRejected: 0, lostOnResume: 0, heldChecks: 0, pastWindowAsks: 0 };

const plan: fc.Arbitrary<Plan> = fc.record({
  workers: fc.array(
    fc.record({
      iterations: fc.integer({ min: 1, max: 3 }),
      holdMs: fc.array(fc.integer({ min: 0, max: 3 * TTL }), { minLength: 3, maxLength: 3 }),
      waitMs: fc.integer({ min: 0, max: 8 * TTL }),
    }),
    { minLength: 2, maxLength: 8 },
  ),
  faults: fc.array(
    fc.oneof(
      fc.record({
        kind: fc.constant('pause' as const),
        worker: fc.nat(7),
        at: fc.integer({ min: 0, max: 20 * TTL }),
        forMs: fc.integer({ min: 1, max: 4 * TTL }),
      }),
      fc.record({
        kind: fc.constant('partition' as const),
        worker: fc.nat(7),
        at: fc.integer({ min: 0, max: 20 * TTL }),
        forMs: fc.integer({ min: 1, max: 4 * TTL }),
        mode: fc.constantFrom('fail' as const, 'hang' as const),
      }),
      fc.record({
        kind: fc.constant('wall-step' as const),
        worker: fc.nat(7),
        at: fc.integer({ min: 0, max: 20 * TTL }),
        byMs: fc.integer({ min: -3_600_000, max: 3_600_000 }),
      }),
    ),
    { maxLength: 8 },
  ),
  seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
});

async function simulate(p: Plan): Promise<void> {
  const clock = new FakeClock({ seed: p.seed });
  const service = new MemoryLockService({ clock });
  const store = new FencedStore<string>();
  const windows: Window[] = [];
  const waits: { worker: number; start: number; end: number; bound: number }[] = [];
  const pausedIntervals: { worker: number; from: number; to: number }[] = [];
  const mustBeLost: { handle: LockHandle; by: number }[] = [];
  const lostAt = new Map<LockHandle, number>();
  const releasedAt = new Map<LockHandle, number>();
  /** Handles whose release the worker began: from then on they are not held, whenever the service answers. */
  const releasing = new Set<LockHandle>();

  const procs = p.workers.map((spec, id) => {
    const view: FakeProcessClock = clock.process();
    const link = new FaultyLockService(service, { clock: view });
    const client = new LockClient(link, {
      clock: view,
      operationTimeoutMs: OP_TIMEOUT,
      retry: { baseMs: 20, capMs: 200 },
    });
    client.events.on('lost', (e) => {
      for (const w of windows)
        if (w.worker === id && w.handle.fencingToken === e.fencingToken) lostAt.set(w.handle, e.at);
    });
    client.events.on('released', (e) => {
      for (const w of windows)
        if (w.worker === id && w.handle.fencingToken === e.fencingToken) releasedAt.set(w.handle, e.at);
    });
    return { id, spec, view, link, client, done: false };
  });

  const runWorker = async (proc: (typeof procs)[number]): Promise<void> => {
    for (let i = 0; i < proc.spec.iterations; i++) {
      const start = clock.monotonic();
      let handle: LockHandle | null = null;
      try {
        handle = await proc.client.acquire(NAME, { ttlMs: TTL, waitMs: proc.spec.waitMs });
      } catch {
        // timeout or transport error: both are fine outcomes, as long as they came in time (checked below)
      }
      const end = clock.monotonic();
      waits.push({ worker: proc.id, start, end, bound: proc.spec.waitMs + OP_TIMEOUT });
      if (!handle) continue;
      windows.push({ worker: proc.id, handle, start: end });
      await proc.view.sleep(proc.spec.holdMs[i] ?? 0);
      // A stale holder writes anyway: only the store's check decides.
      store.write(NAME, handle.fencingToken, `w${proc.id}#${i}`);
      releasing.add(handle);
      await handle.release().catch(() => {});
    }
    proc.done = true;
  };

  // 6. What a running process asks isHeld() is the model's answer: held until its release began, its loss was
  // reported or its window closed, whichever came first. The window is the one that matters: right after a pause
  // nothing has run yet to report the loss, and only the window tells the handle is no longer held.
  const askIsHeld = (): void => {
    const now = clock.monotonic();
    for (const w of windows) {
      if (procs[w.worker]?.view.paused) continue;
      const held = !releasing.has(w.handle) && !lostAt.has(w.handle) && now < w.handle.expiresAt;
      if (w.handle.state === 'held' && now >= w.handle.expiresAt) totals.pastWindowAsks += 1;
      expect(w.handle.isHeld(), `isHeld() of token ${w.handle.fencingToken} at ${now}`).toBe(held);
    }
  };

  const running = procs.map((proc) => runWorker(proc));
  const faults = [...p.faults].filter((f) => f.worker < procs.length).sort((a, b) => a.at - b.at);
  const ends: { at: number; run: () => void }[] = [];

  for (let t = 0; t <= 60 * TTL && !procs.every((proc) => proc.done); t += STEP) {
    while (faults.length > 0 && (faults[0]?.at ?? Number.POSITIVE_INFINITY) <= t) {
      const fault = faults.shift() as Fault;
      const proc = procs[fault.worker];
      if (!proc) continue;
      if (fault.kind === 'pause' && !proc.view.paused) {
        proc.view.pause();
        const from = clock.monotonic();
        ends.push({
          at: t + fault.forMs,
          run: () => {
            proc.view.resume();
            const now = clock.monotonic();
            pausedIntervals.push({ worker: proc.id, from, to: now });
            for (const w of windows) {
              if (w.worker !== proc.id || w.handle.state !== 'held') continue;
              if (service.holder(NAME) !== w.handle.fencingToken)
                mustBeLost.push({ handle: w.handle, by: now + TTL / 3 });
            }
          },
        });
      } else if (fault.kind === 'partition') {
        proc.link.partition(fault.mode);
        ends.push({ at: t + fault.forMs, run: () => proc.link.heal() });
      } else if (fault.kind === 'wall-step') {
        clock.stepWall(fault.byMs);
      }
    }
    for (const end of ends.filter((e) => e.at <= t)) {
      ends.splice(ends.indexOf(end), 1);
      end.run();
    }
    askIsHeld();
    const runningBefore = procs.filter((proc) => !proc.view.paused).map((proc) => proc.id);
    // A window the tick never closes keeps its timer re-armed at a passed time: FakeClock rejects that busy loop, so
    // a lost expiry fails this run (and fast-check shrinks it) instead of spinning until the test's timeout.
    await clock.advance(STEP);
    // 5. A running process never believes in a handle past its window (checked after each step it ran through).
    for (const w of windows) {
      if (!runningBefore.includes(w.worker) || procs[w.worker]?.view.paused || w.handle.state !== 'held')
        continue;
      totals.heldChecks += 1;
      expect(clock.monotonic()).toBeLessThanOrEqual(w.handle.expiresAt + STEP);
    }
    askIsHeld();
  }
  for (const end of ends) end.run();
  await clock.advance(10 * TTL);
  await Promise.all(running);
  await Promise.all(procs.map((proc) => proc.client.close()));

  totals.grants += windows.length;
  totals.staleWritesRejected += store.rejected.length;
  totals.lostOnResume += mustBeLost.length;

  // 1. The resource never went back in time.
  const accepted = store.accepted.map((w) => w.token);
  for (let i = 1; i < accepted.length; i++)
    expect(accepted[i]).toBeGreaterThanOrEqual(accepted[i - 1] as bigint);
  // Each grant has its own token.
  expect(new Set(windows.map((w) => w.handle.fencingToken)).size).toBe(windows.length);

  // 2. No two validity windows overlap: a handle's window ends at its release, its loss, or its expiresAt.
  for (const w of windows) {
    const stop = releasedAt.get(w.handle) ?? lostAt.get(w.handle) ?? Number.POSITIVE_INFINITY;
    w.end = Math.min(w.handle.expiresAt, stop);
  }
  const ordered = [...windows].sort((a, b) => Number(a.handle.fencingToken - b.handle.fencingToken));
  for (let i = 1; i < ordered.length; i++) {
    const prev = ordered[i - 1] as Window;
    const next = ordered[i] as Window;
    expect(prev.end as number).toBeLessThanOrEqual(next.start);
  }

  // 3. Every wait settled within its bound, not counting time its own process spent paused.
  for (const wait of waits) {
    const paused = pausedIntervals
      .filter((iv) => iv.worker === wait.worker)
      .reduce((sum, iv) => sum + Math.max(0, Math.min(iv.to, wait.end) - Math.max(iv.from, wait.start)), 0);
    expect(wait.end - wait.start).toBeLessThanOrEqual(wait.bound + paused + STEP);
  }

  // 4. A lease that truly expired during a pause is reported Lost within one renewal interval of the resume.
  for (const { handle, by } of mustBeLost) {
    expect(handle.state).not.toBe('held');
    const at = lostAt.get(handle) ?? releasedAt.get(handle);
    expect(at).toBeDefined();
    expect(at as number).toBeLessThanOrEqual(by);
  }
}

describe('lifecycle under pauses, partitions and clock steps (property)', () => {
  it(`holds its invariants over ${RUNS} random schedules`, async () => {
    await fc.assert(fc.asyncProperty(plan, simulate), { numRuns: RUNS, seed: SEED, verbose: 1 });
    // The schedules must have produced the situations the invariants are about, or the test proves nothing.
    expect(totals.grants).toBeGreaterThan(RUNS);
    expect(totals.staleWritesRejected).toBeGreaterThan(0);
    expect(totals.lostOnResume).toBeGreaterThan(0);
    expect(totals.heldChecks).toBeGreaterThan(RUNS);
    expect(totals.pastWindowAsks).toBeGreaterThan(0);
    console.log(`property totals over ${RUNS} runs: ${JSON.stringify(totals)}`);
  }, 600_000);
});
