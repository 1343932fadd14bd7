import { expect } from 'vitest';
import type { DbSpec, LockSpec } from '../dist/backends.js';
import { Demo, type DemoUpdate, type Results } from '../dist/demo.js';
import { planWorkers, type ScenarioSettings } from '../dist/plan.js';
import type { RunKind, RunResult, TimelineEvent } from '../dist/timeline.js';

export const DEFAULTS: ScenarioSettings = {
  workers: 4,
  iterations: 4,
  ttlMs: 1_000,
  pauseMs: 3_500,
  seed: 1,
  pauseWorker: 2,
  initialBalance: 1_000,
};

export interface Outcome {
  readonly results: Results;
  readonly events: Record<RunKind, TimelineEvent[]>;
  readonly settings: ScenarioSettings;
}

/** Runs one scenario on a fresh Demo and returns both results and every event, per run. */
export async function runScenario(
  lock: LockSpec,
  db: DbSpec,
  overrides: Partial<ScenarioSettings> = {},
): Promise<Outcome> {
  const demo = await Demo.open(lock, db, DEFAULTS);
  try {
    return await runOn(demo, overrides);
  } finally {
    await demo.close();
  }
}

/** Runs one scenario on an open Demo (one database for several scenarios: PGlite takes a while to start). */
export async function runOn(
  demo: Demo,
  overrides: Partial<ScenarioSettings> = {},
  during?: (demo: Demo, update: DemoUpdate) => void,
): Promise<Outcome> {
  const settings = { ...DEFAULTS, ...overrides };
  const events: Record<RunKind, TimelineEvent[]> = { unfenced: [], fenced: [] };
  const unsubscribe = demo.subscribe((update) => {
    if (update.type === 'event') events[update.event.run].push(update.event);
    during?.(demo, update);
  });
  try {
    return { results: await demo.run(settings), events, settings };
  } finally {
    unsubscribe();
  }
}

/**
 * The arithmetic both runs must satisfy, recomputed from the raw write events (not from the demo's own
 * bookkeeping): every deposit was made once, the writes chain (each write's `before` is the previous write's
 * result), and the shortfall is exactly what the writes wiped out.
 */
export function checkBooks(outcome: Outcome, run: RunKind): RunResult {
  const r = outcome.results[run];
  const events = outcome.events[run];
  const { workers, iterations, initialBalance } = outcome.settings;
  const plans = planWorkers(outcome.settings);
  const total = plans.flatMap((p) => p.deposits).reduce((s, d) => s + d.amount, 0);
  expect(r.deposits).toBe(workers * iterations);
  expect(r.expectedBalance).toBe(initialBalance + total);

  // Each worker believes each of its deposits landed exactly once.
  const deposited = events.filter((e) => e.type === 'deposited');
  expect(deposited).toHaveLength(workers * iterations);
  expect(new Set(deposited.map((e) => `${e.worker}/${e.iteration}`)).size).toBe(workers * iterations);

  // Accepted writes, in commit order, form one chain from the initial balance to the final one.
  const writes = events.filter((e) => e.type === 'write' && e.accepted);
  expect(writes).toHaveLength(workers * iterations);
  let balance = initialBalance;
  let wiped = 0;
  for (const w of writes) {
    if (w.type !== 'write') continue;
    expect(w.before).toBe(balance);
    expect(w.to).toBe(w.from + w.deposit.amount);
    wiped += w.before - w.from;
    balance = w.to;
  }
  expect(r.finalBalance).toBe(balance);
  expect(r.expectedBalance - r.finalBalance).toBe(wiped);
  expect(r.lostAmount).toBe(wiped);
  expect(r.lostDeposits.reduce((s, d) => s + d.amount, 0)).toBe(r.lostAmount);
  return r;
}

/** The gate's side: nothing lost, every refusal was a token below the mark, and the mark only rose. */
export function checkFenced(outcome: Outcome): RunResult {
  const r = checkBooks(outcome, 'fenced');
  const events = outcome.events.fenced;
  expect(r.finalBalance).toBe(r.expectedBalance);
  expect(r.lostDeposits).toEqual([]);
  expect(r.staleWritesLanded).toBe(0);
  let mark = 0n;
  for (const e of events) {
    if ((e.type !== 'write' && e.type !== 'read') || e.highWaterMark === null) continue;
    const token = BigInt(e.token);
    const after = BigInt(e.highWaterMark);
    expect(after).toBeGreaterThanOrEqual(mark);
    if (e.accepted) expect(token).toBeGreaterThanOrEqual(mark);
    else expect(token).toBeLessThan(after);
    mark = after;
  }
  for (const pause of r.pauses.filter((p) => p.overlappedTakeover)) {
    // The frozen worker's write was refused, its client reported the loss, and it redid the deposit.
    const write = events.find(
      (e) =>
        e.type === 'write' && e.worker === pause.worker && e.token === pause.token && e.t >= pause.startedAt,
    );
    expect(write?.type === 'write' && write.accepted).toBe(false);
    expect(
      events.some((e) => e.type === 'lost' && e.worker === pause.worker && e.token === pause.token),
    ).toBe(true);
    expect(
      events.some(
        (e) => e.type === 'deposited' && e.worker === pause.worker && e.tries > 1 && e.t > pause.endedAt,
      ),
    ).toBe(true);
  }
  return r;
}

/** Without the gate: a freeze that overlapped a takeover always costs deposits, and one that did not costs none. */
export function checkUnfenced(outcome: Outcome): RunResult {
  const r = checkBooks(outcome, 'unfenced');
  expect(r.writesRejected).toBe(0);
  expect(r.readsRejected).toBe(0);
  const overlapped = r.pauses.some((p) => p.overlappedTakeover);
  expect(r.lostAmount > 0).toBe(overlapped);
  if (overlapped) expect(r.staleWritesLanded).toBeGreaterThanOrEqual(1);
  return r;
}
