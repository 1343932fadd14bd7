import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { MessageChannel, Worker } from 'node:worker_threads';
import type { LockService } from '@dlock/core';
import { type LockSpec, lockTag } from './backends.js';
import type { Account, Ledger } from './ledger.js';
import { LockServiceHost } from './lock-service-host.js';
import { planWorkers, type ScenarioSettings, type WorkerPlan } from './plan.js';
import type { DepositRef, PauseRecord, RunKind, RunResult, TimelineEvent } from './timeline.js';
import type { MainMessage, WorkerMessage, WorkerSetup } from './worker-protocol.js';

const WORKER_URL = new URL('./worker.js', import.meta.url);

export interface ScenarioDeps {
  readonly ledger: Ledger;
  readonly lock: LockSpec;
  /** The shared in-memory service, when `lock.kind === 'memory'`. */
  readonly memoryService?: LockService;
  readonly onEvent: (event: TimelineEvent) => void;
}

/**
 * One scenario: the same workers, deposits and pause, run twice at the same time on two accounts — once with a
 * plain UPDATE, once through the fencing gate. Resolves with both results once every worker finished.
 */
export class Scenario {
  readonly settings: ScenarioSettings;
  readonly #deps: ScenarioDeps;
  readonly #runs: Run[] = [];
  /**
   * `performance.timeOrigin + performance.now()` when every worker of both runs was connected and told to go: the
   * zero of every timeline event.
   */
  epoch: number;
  #deadline: NodeJS.Timeout | undefined;
  #deadlineReject: ((error: Error) => void) | undefined;
  #deadlineAt = 0;
  #ready = 0;

  constructor(settings: ScenarioSettings, deps: ScenarioDeps) {
    this.settings = settings;
    this.#deps = deps;
    this.epoch = performance.timeOrigin + performance.now();
  }

  /** Milliseconds since the scenario started. */
  now(): number {
    return performance.timeOrigin + performance.now() - this.epoch;
  }

  async run(): Promise<Record<RunKind, RunResult>> {
    const s = this.settings;
    const tag = `demo-${randomBytes(4).toString('hex')}`;
    const plans = planWorkers(s);
    const budget = s.workers * s.iterations * 700 + 2 * s.pauseMs + 15_000;
    const timedOut = new Promise<never>((_, reject) => {
      this.#deadlineReject = reject;
      this.#arm(budget);
    });
    try {
      for (const kind of ['unfenced', 'fenced'] as const) {
        const lockName = `${tag}/${kind}/account-1`;
        const account = await this.#deps.ledger.openAccount(
          kind,
          lockName,
          `${lockTag(this.#deps.lock)}:${lockName}`,
          s.initialBalance,
        );
        this.#runs.push(new Run(kind, account, lockName, plans, this, this.#deps));
      }
      const results = await Promise.race([Promise.all(this.#runs.map((r) => r.finished)), timedOut]);
      const [unfenced, fenced] = results;
      if (!unfenced || !fenced) throw new Error('a run did not report');
      return { unfenced, fenced };
    } finally {
      clearTimeout(this.#deadline);
      await Promise.all(this.#runs.map((r) => r.stop()));
    }
  }

  /** A worker is connected. When all of both runs are, the clock starts and both runs begin together. */
  workerReady(): void {
    this.#ready += 1;
    if (this.#ready !== this.settings.workers * this.#runs.length || this.#runs.length < 2) return;
    this.epoch = performance.timeOrigin + performance.now();
    for (const run of this.#runs) run.start(this.epoch);
  }

  /** Freezes worker `n` of both runs the next time it holds the lock. The deadline grows by the pause. */
  pause(worker: number): boolean {
    if (worker < 1 || worker > this.settings.workers || this.#runs.length === 0) return false;
    for (const run of this.#runs) run.pauseNext(worker);
    this.#arm(this.#deadlineAt - this.now() + this.settings.pauseMs + this.settings.ttlMs);
    return true;
  }

  #arm(ms: number): void {
    clearTimeout(this.#deadline);
    this.#deadlineAt = this.now() + ms;
    this.#deadline = setTimeout(
      () =>
        this.#deadlineReject?.(new Error(`the scenario did not finish within ${Math.round(ms / 1000)} s`)),
      ms,
    );
  }
}

/** One of the two runs: its workers, its account, and the record it keeps to compute the result. */
class Run {
  readonly kind: RunKind;
  readonly finished: Promise<RunResult>;
  readonly #account: Account;
  readonly #scenario: Scenario;
  readonly #deps: ScenarioDeps;
  readonly #workers: Worker[] = [];
  readonly #hosts: LockServiceHost[] = [];
  readonly #events: TimelineEvent[] = [];
  readonly #all: DepositRef[] = [];
  #done = 0;
  #go = false;
  #epoch = 0;
  #stopped = false;

  constructor(
    kind: RunKind,
    account: Account,
    lockName: string,
    plans: readonly WorkerPlan[],
    scenario: Scenario,
    deps: ScenarioDeps,
  ) {
    this.kind = kind;
    this.#account = account;
    this.#scenario = scenario;
    this.#deps = deps;
    const s = scenario.settings;
    this.finished = new Promise<RunResult>((resolve, reject) => {
      plans.forEach((plan, i) => {
        const worker = i + 1;
        plan.deposits.forEach((d, k) => {
          this.#all.push({ worker, iteration: k + 1, amount: d.amount });
        });
        let servicePort: WorkerSetup['servicePort'];
        const transferList = [];
        if (deps.memoryService) {
          const channel = new MessageChannel();
          this.#hosts.push(new LockServiceHost(deps.memoryService, channel.port1));
          servicePort = channel.port2;
          transferList.push(channel.port2);
        }
        const setup: WorkerSetup = {
          run: kind,
          worker,
          lock: deps.lock,
          ...(servicePort ? { servicePort } : {}),
          lockName,
          ttlMs: s.ttlMs,
          // Long enough to outlast a frozen holder and a queue of busy ones; bounded all the same.
          waitMs: s.pauseMs + s.ttlMs * 2 + s.workers * 1_000 + 10_000,
          pauseMs: s.pauseMs,
          deposits: plan.deposits,
          pauseAt: plan.pauseAt,
          workBeforeFreezeMs: plan.workBeforeFreezeMs,
        };
        const thread = new Worker(WORKER_URL, { workerData: setup, transferList });
        this.#workers.push(thread);
        thread.on('message', (message: WorkerMessage) => {
          this.#onMessage(thread, message).then(
            (finished) => {
              if (finished) this.#result().then(resolve, reject);
            },
            (error: unknown) => reject(error instanceof Error ? error : new Error(String(error))),
          );
        });
        thread.on('error', (error) => reject(new Error(`worker ${worker}: ${error.message}`)));
        thread.on('exit', (code) => {
          if (!this.#stopped && code !== 0) reject(new Error(`worker ${worker} exited with code ${code}`));
        });
      });
    });
    this.finished.catch(() => {});
  }

  /**
   * Lets the workers go. The one to be frozen goes first, the others once it holds the lock: then they all still
   * have their deposits to make while it is frozen, whatever the lock service's hand-off order.
   */
  start(epoch: number): void {
    this.#epoch = epoch;
    const first = this.#scenario.settings.pauseWorker;
    this.#workers.forEach((thread, i) => {
      if (first === null || first === i + 1) this.#post(thread, { kind: 'go', epoch });
    });
    if (first === null) this.#go = true;
  }

  pauseNext(worker: number): void {
    this.#post(this.#workers[worker - 1], { kind: 'pause-next' });
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#workers.map((w) => w.terminate().catch(() => 0)));
    for (const host of this.#hosts) host.close();
  }

  #post(thread: Worker | undefined, message: MainMessage): void {
    if (thread && !this.#stopped) thread.postMessage(message);
  }

  #record(event: TimelineEvent): void {
    this.#events.push(event);
    this.#deps.onEvent(event);
  }

  /** Resolves true when this message finished the run. */
  async #onMessage(thread: Worker, message: WorkerMessage): Promise<boolean> {
    switch (message.kind) {
      case 'event': {
        const e = message.event;
        this.#record(e);
        if (e.type === 'acquired' && e.worker === this.#scenario.settings.pauseWorker && !this.#go) {
          this.#go = true;
          this.#workers.forEach((other, i) => {
            if (i + 1 !== e.worker) this.#post(other, { kind: 'go', epoch: this.#epoch });
          });
        }
        return false;
      }
      case 'failed':
        throw new Error(message.message);
      case 'ready':
        this.#scenario.workerReady();
        return false;
      case 'done':
        this.#done += 1;
        return this.#done === this.#workers.length;
      case 'read': {
        const worker = this.#workers.indexOf(thread) + 1;
        const outcome = await this.#account.read(message.token).catch((error: unknown) => {
          this.#post(thread, { kind: 'reply-error', id: message.id, message: String(error) });
          throw error;
        });
        this.#record({
          run: this.kind,
          worker,
          t: this.#scenario.now(),
          type: 'read',
          sentAt: message.sentAt,
          token: String(message.token),
          accepted: outcome.accepted,
          balance: outcome.balance,
          highWaterMark: outcome.highWaterMark === null ? null : String(outcome.highWaterMark),
        });
        this.#post(thread, {
          kind: 'reply',
          id: message.id,
          accepted: outcome.accepted,
          balance: outcome.balance,
          version: outcome.version,
        });
        return false;
      }
      case 'write': {
        const worker = this.#workers.indexOf(thread) + 1;
        const outcome = await this.#account
          .write(message.token, message.version, message.from, message.deposit)
          .catch((error: unknown) => {
            this.#post(thread, { kind: 'reply-error', id: message.id, message: String(error) });
            throw error;
          });
        const to = message.from + message.deposit.amount;
        this.#record({
          run: this.kind,
          worker,
          t: this.#scenario.now(),
          type: 'write',
          sentAt: message.sentAt,
          token: String(message.token),
          accepted: outcome.accepted,
          from: message.from,
          to,
          before: outcome.before,
          deposit: message.deposit,
          stale: outcome.stale,
          highWaterMark: outcome.highWaterMark === null ? null : String(outcome.highWaterMark),
          erased: outcome.erased,
        });
        this.#post(thread, {
          kind: 'reply',
          id: message.id,
          accepted: outcome.accepted,
          balance: outcome.accepted ? to : outcome.before,
          version: 0,
        });
        return false;
      }
    }
  }

  async #result(): Promise<RunResult> {
    const s = this.#scenario.settings;
    const finalBalance = await this.#account.balance();
    const events = this.#events;
    const kept = this.#account.deposits;
    const lostDeposits = this.#all.filter(
      (d) => !kept.some((k) => k.worker === d.worker && k.iteration === d.iteration),
    );
    const sum = (ds: readonly DepositRef[]) => ds.reduce((total, d) => total + d.amount, 0);
    const writes = events.filter((e) => e.type === 'write');
    let highest = 0n;
    for (const e of events) if (e.type === 'acquired' && BigInt(e.token) > highest) highest = BigInt(e.token);
    const mark = this.#account.highWaterMark;
    if (finalBalance !== s.initialBalance + sum(kept)) {
      throw new Error(
        `${this.kind} run: the table says ${finalBalance}, the demo's record of its deposits ${s.initialBalance + sum(kept)}`,
      );
    }
    return {
      run: this.kind,
      initialBalance: s.initialBalance,
      expectedBalance: s.initialBalance + sum(this.#all),
      finalBalance,
      lostDeposits,
      lostAmount: sum(lostDeposits),
      deposits: this.#all.length,
      writesAccepted: writes.filter((e) => e.accepted).length,
      writesRejected: writes.filter((e) => !e.accepted).length,
      readsRejected: events.filter((e) => e.type === 'read' && !e.accepted).length,
      staleWritesLanded: writes.filter((e) => e.accepted && e.stale).length,
      redone: events.filter((e) => e.type === 'deposited' && e.tries > 1).length,
      lostEvents: events.filter((e) => e.type === 'lost').length,
      pauses: pausesOf(events),
      highestToken: String(highest),
      highWaterMark: mark === null ? null : String(mark),
      durationMs: this.#scenario.now(),
    };
  }
}

/**
 * Each freeze, and whether it overlapped a takeover: another worker read the account after the frozen worker's
 * read and committed a write computed from it before the frozen worker's own write. Then the two writes cannot
 * both survive: without a gate one of the deposits is lost; with the gate the frozen worker's write is refused.
 */
export function pausesOf(events: readonly TimelineEvent[]): PauseRecord[] {
  const pauses: PauseRecord[] = [];
  events.forEach((start, i) => {
    if (start.type !== 'pause-start') return;
    const worker = start.worker;
    const end = events.slice(i).find((e) => e.type === 'pause-end' && e.worker === worker);
    const endedAt = end?.t ?? Number.POSITIVE_INFINITY;
    const ownRead = events
      .slice(0, i)
      .findLast((e) => e.type === 'read' && e.worker === worker && e.token === start.token);
    const ownWrite = events
      .slice(i)
      .find((e) => e.type === 'write' && e.worker === worker && e.token === start.token);
    const readAt = ownRead?.t ?? start.t;
    const writeAt = ownWrite?.t ?? endedAt;
    const overlappedTakeover = events.some((e, j) => {
      if (e.type !== 'write' || !e.accepted || e.worker === worker || e.t <= readAt) return false;
      const theirRead = events
        .slice(0, j)
        .findLast((r) => r.type === 'read' && r.worker === e.worker && r.token === e.token);
      return theirRead !== undefined && theirRead.t > readAt && theirRead.t < writeAt;
    });
    const takeoverTokens: string[] = [];
    for (const e of events) {
      if (e.type === 'acquired' && e.worker !== worker && e.t >= start.t && e.t <= endedAt) {
        takeoverTokens.push(e.token);
      }
    }
    pauses.push({
      worker,
      token: start.token,
      startedAt: start.t,
      endedAt,
      overlappedTakeover,
      takeoverTokens,
    });
  });
  return pauses;
}
