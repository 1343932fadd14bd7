import { type LockService, MemoryLockService } from '@dlock/core';
import { type DbSpec, describeDb, describeLock, type LockSpec } from './backends.js';
import { Ledger } from './ledger.js';
import { probeLockService } from './lock-services.js';
import { pauseIteration, type ScenarioSettings } from './plan.js';
import { Scenario } from './scenario.js';
import type { RunKind, RunResult, ScenarioInfo, TimelineEvent } from './timeline.js';

/** What listeners (the terminal, the dashboard) receive, in order. */
export type DemoUpdate =
  | { readonly type: 'scenario-start'; readonly id: number; readonly info: ScenarioInfo }
  | { readonly type: 'event'; readonly id: number; readonly event: TimelineEvent }
  | { readonly type: 'pause-requested'; readonly id: number; readonly worker: number; readonly t: number }
  | { readonly type: 'scenario-end'; readonly id: number; readonly results: Record<RunKind, RunResult> }
  | { readonly type: 'scenario-failed'; readonly id: number; readonly message: string };

export type Results = Record<RunKind, RunResult>;

/**
 * The demo's long-lived part: the database, the lock service, and the scenario running now (one at a time).
 * The dashboard's buttons and the command line both drive it; listeners see every scenario from its start.
 */
export class Demo {
  readonly lock: LockSpec;
  readonly db: DbSpec;
  readonly settings: ScenarioSettings;
  readonly #ledger: Ledger;
  readonly #memory: LockService | undefined;
  readonly #listeners = new Set<(update: DemoUpdate) => void>();
  /** Updates of the current (or last) scenario, replayed to a dashboard that connects late. */
  #history: DemoUpdate[] = [];
  #current: Scenario | undefined;
  #id = 0;

  private constructor(lock: LockSpec, db: DbSpec, settings: ScenarioSettings, ledger: Ledger) {
    this.lock = lock;
    this.db = db;
    this.settings = settings;
    this.#ledger = ledger;
    this.#memory = lock.kind === 'memory' ? new MemoryLockService() : undefined;
  }

  /** Checks the lock service answers and opens the database; throws `BackendError` (one line) when not. */
  static async open(lock: LockSpec, db: DbSpec, settings: ScenarioSettings): Promise<Demo> {
    await probeLockService(lock, settings.ttlMs);
    return new Demo(lock, db, settings, await Ledger.open(db));
  }

  get running(): boolean {
    return this.#current !== undefined;
  }

  get history(): readonly DemoUpdate[] {
    return this.#history;
  }

  subscribe(listener: (update: DemoUpdate) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Runs one scenario (both runs) to the end, with the settings given at open unless overridden. Rejects if one
   * is already running or a worker failed.
   */
  async run(overrides: Partial<ScenarioSettings> = {}): Promise<Results> {
    if (this.#current) throw new Error('a scenario is already running');
    const settings: ScenarioSettings = { ...this.settings, ...overrides };
    const id = ++this.#id;
    const scenario = new Scenario(settings, {
      ledger: this.#ledger,
      lock: this.lock,
      ...(this.#memory ? { memoryService: this.#memory } : {}),
      onEvent: (event) => this.#publish({ type: 'event', id, event }),
    });
    this.#current = scenario;
    this.#history = [];
    this.#publish({ type: 'scenario-start', id, info: this.#info(settings) });
    try {
      const results = await scenario.run();
      this.#current = undefined;
      this.#publish({ type: 'scenario-end', id, results });
      return results;
    } catch (error) {
      this.#current = undefined;
      this.#publish({
        type: 'scenario-failed',
        id,
        message: error instanceof Error ? error.message : String(error),
      });
      throw error;
    }
  }

  /** Freezes worker `n` (both runs) the next time it holds the lock. False when no scenario is running. */
  pause(worker: number): boolean {
    const scenario = this.#current;
    if (!scenario?.pause(worker)) return false;
    this.#publish({ type: 'pause-requested', id: this.#id, worker, t: scenario.now() });
    return true;
  }

  async close(): Promise<void> {
    this.#listeners.clear();
    await this.#ledger.close();
  }

  #info(settings: ScenarioSettings): ScenarioInfo {
    return {
      lock: describeLock(this.lock),
      db: describeDb(this.db),
      workers: settings.workers,
      iterations: settings.iterations,
      ttlMs: settings.ttlMs,
      pauseMs: settings.pauseMs,
      seed: settings.seed,
      pauseWorker: settings.pauseWorker,
      pauseIteration: settings.pauseWorker === null ? null : pauseIteration(settings.iterations),
      initialBalance: settings.initialBalance,
    };
  }

  #publish(update: DemoUpdate): void {
    this.#history.push(update);
    for (const listener of [...this.#listeners]) {
      try {
        listener(update);
      } catch (error) {
        process.emitWarning(`demo listener failed: ${String(error)}`);
      }
    }
  }
}
