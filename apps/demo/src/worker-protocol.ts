import type { MessagePort } from 'node:worker_threads';
import type { LockSpec } from './backends.js';
import type { DepositRef, RunKind, TimelineEvent } from './timeline.js';

/** Everything a worker thread is told at start (`workerData`). */
export interface WorkerSetup {
  readonly run: RunKind;
  readonly worker: number;
  readonly lock: LockSpec;
  /** The in-memory service's port; only for `lock.kind === 'memory'`. */
  readonly servicePort?: MessagePort;
  readonly lockName: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly pauseMs: number;
  /** Per deposit, in order: its amount and how long the worker "works" between its read and its write. */
  readonly deposits: readonly { readonly amount: number; readonly workMs: number }[];
  /** 1-based deposit during which the worker is frozen (once), or null. */
  readonly pauseAt: number | null;
  /** Work time of the try on which it freezes (long enough to renew once first). */
  readonly workBeforeFreezeMs: number;
}

/** Worker → main. */
export type WorkerMessage =
  | { readonly kind: 'event'; readonly event: TimelineEvent }
  | { readonly kind: 'read'; readonly id: number; readonly token: bigint; readonly sentAt: number }
  | {
      readonly kind: 'write';
      readonly id: number;
      readonly token: bigint;
      /** Scenario time the worker sent it (it may reach the database later). */
      readonly sentAt: number;
      readonly version: number;
      readonly from: number;
      readonly deposit: DepositRef;
    }
  | { readonly kind: 'failed'; readonly message: string }
  /** Connected to the lock service; waiting for `go`. */
  | { readonly kind: 'ready' }
  | { readonly kind: 'done' };

/** Main → worker. */
export type MainMessage =
  | {
      readonly kind: 'reply';
      readonly id: number;
      readonly accepted: boolean;
      readonly balance: number;
      readonly version: number;
    }
  | { readonly kind: 'reply-error'; readonly id: number; readonly message: string }
  /** Freeze the next time you hold the lock (the dashboard's pause button). */
  | { readonly kind: 'pause-next' }
  /**
   * Start depositing. `epoch` is the scenario's zero, as `performance.timeOrigin + performance.now()` of the main
   * thread: every worker is connected by then, so the timeline starts with the work, not with start-up.
   */
  | { readonly kind: 'go'; readonly epoch: number };
