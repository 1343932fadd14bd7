/** Everything random about a scenario comes from its seed, so a run can be repeated exactly (`--seed`). */

export interface ScenarioSettings {
  readonly workers: number;
  /** Deposits per worker. */
  readonly iterations: number;
  readonly ttlMs: number;
  readonly pauseMs: number;
  readonly seed: number;
  /** 1-based worker frozen automatically; null: only the dashboard's button pauses. */
  readonly pauseWorker: number | null;
  readonly initialBalance: number;
}

export interface WorkerPlan {
  readonly deposits: readonly { readonly amount: number; readonly workMs: number }[];
  /** 1-based deposit during which this worker is frozen, or null. */
  readonly pauseAt: number | null;
  /**
   * How long the worker works on the try it is frozen in: past its first renewal, so the timeline shows renewals
   * running, then stopping.
   */
  readonly workBeforeFreezeMs: number;
}

/**
 * The deposit on which the chosen worker is frozen: its first. The other workers start only once it holds the
 * lock, so they all still have their deposits to make while it is frozen: a takeover is certain. (Waiting for a
 * later turn could let an unlucky worker wait until the others were done, and there would be nobody to take over.)
 */
export function pauseIteration(_iterations: number): number {
  return 1;
}

/** Amounts are multiples of 10 from 10 to 90; work takes 80–250 ms (less with a very short TTL). */
export function planWorkers(settings: ScenarioSettings): WorkerPlan[] {
  const random = mulberry32(settings.seed);
  const maxWork = Math.min(250, settings.ttlMs * 0.45);
  const minWork = Math.min(80, maxWork / 2);
  return Array.from({ length: settings.workers }, (_, i) => ({
    deposits: Array.from({ length: settings.iterations }, () => ({
      amount: 10 * (1 + Math.floor(random() * 9)),
      workMs: Math.round(minWork + random() * (maxWork - minWork)),
    })),
    pauseAt: settings.pauseWorker === i + 1 ? pauseIteration(settings.iterations) : null,
    workBeforeFreezeMs: Math.round(settings.ttlMs * 0.6),
  }));
}

/** The default frozen worker for a seed. */
export function seededPauseWorker(seed: number, workers: number): number {
  const random = mulberry32(seed ^ 0x5bd1e995);
  return 1 + Math.floor(random() * workers);
}

/** A small, well-mixed 32-bit generator: plenty for picking amounts, and identical on every platform. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
