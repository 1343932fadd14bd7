/**
 * What the terminal and the dashboard draw: one flat stream of events per scenario, in JSON-safe form (tokens as
 * decimal strings, times in ms since the scenario started on a clock shared by every thread).
 */

/** The two runs of one scenario: the same workers and pause, once without the gate and once through it. */
export type RunKind = 'unfenced' | 'fenced';
export const RUN_KINDS: readonly RunKind[] = ['unfenced', 'fenced'];

export const RUN_TITLES: Readonly<Record<RunKind, string>> = {
  unfenced: 'without fencing',
  fenced: 'with @dlock/fencing-kysely',
};

interface Base {
  readonly run: RunKind;
  /** 1-based worker number. */
  readonly worker: number;
  /** Milliseconds since the scenario started. */
  readonly t: number;
}

/** A deposit is one unit of work: worker `worker` adds `amount` to the account, on its `iteration`-th turn. */
export interface DepositRef {
  readonly worker: number;
  /** 1-based. */
  readonly iteration: number;
  readonly amount: number;
}

export type TimelineEvent = Base &
  (
    | { readonly type: 'waiting'; readonly iteration: number }
    // From the worker's LockClient event stream:
    | {
        readonly type: 'acquired';
        readonly token: string;
        readonly ttlMs: number;
        readonly expiresAt: number;
      }
    | { readonly type: 'renewed'; readonly token: string; readonly expiresAt: number }
    | { readonly type: 'renew-failed'; readonly token: string; readonly failures: number }
    | { readonly type: 'lost'; readonly token: string; readonly reason: string }
    | { readonly type: 'released'; readonly token: string }
    // From the worker's own loop:
    | { readonly type: 'pause-start'; readonly token: string; readonly ms: number }
    | { readonly type: 'pause-end'; readonly token: string; readonly ms: number }
    | {
        readonly type: 'deposited';
        readonly iteration: number;
        readonly amount: number;
        readonly tries: number;
      }
    | { readonly type: 'worker-done' }
    // From the database side (the main thread), when a statement finished:
    | {
        readonly type: 'read';
        readonly sentAt: number;
        readonly token: string;
        readonly accepted: boolean;
        readonly balance: number;
        readonly highWaterMark: string | null;
      }
    | {
        readonly type: 'write';
        /** When the worker sent it; `t` is when the database finished it. */
        readonly sentAt: number;
        readonly token: string;
        readonly accepted: boolean;
        /** The balance the worker read, and the one it asked to store (read + its deposit). */
        readonly from: number;
        readonly to: number;
        /** Balance in the table just before this write; `before - from` was wiped out by it. */
        readonly before: number;
        readonly deposit: DepositRef;
        /** A newer token had already touched the account: the writer's lock was gone. */
        readonly stale: boolean;
        /** Mark after the statement (fenced run), or null without a gate. */
        readonly highWaterMark: string | null;
        /** Deposits this write erased from the balance (they were in `before`, not in `from`). */
        readonly erased: readonly DepositRef[];
      }
  );

export type TimelineEventType = TimelineEvent['type'];

/** The per-run outcome, computed from the database's own record of every statement. */
export interface RunResult {
  readonly run: RunKind;
  readonly initialBalance: number;
  /** Initial balance plus every deposit the workers made (each worker believes each of its deposits landed). */
  readonly expectedBalance: number;
  readonly finalBalance: number;
  /** Deposits that are not in the final balance. Their sum is exactly `expectedBalance - finalBalance`. */
  readonly lostDeposits: readonly DepositRef[];
  readonly lostAmount: number;
  readonly deposits: number;
  readonly writesAccepted: number;
  readonly writesRejected: number;
  readonly readsRejected: number;
  /** Accepted writes whose token was older than one that had already touched the account. */
  readonly staleWritesLanded: number;
  /** Deposits a worker had to start over: the gate refused it, or its lock was lost before it wrote. */
  readonly redone: number;
  readonly lostEvents: number;
  readonly pauses: readonly PauseRecord[];
  /** Highest fencing token any worker was granted, and the gate's mark at the end (null without a gate). */
  readonly highestToken: string;
  readonly highWaterMark: string | null;
  readonly durationMs: number;
}

export interface PauseRecord {
  readonly worker: number;
  readonly token: string;
  readonly startedAt: number;
  readonly endedAt: number;
  /** Another worker read the account after this worker's read, before its write, and wrote from that read. */
  readonly overlappedTakeover: boolean;
  /** Tokens granted to other workers while this one was frozen. */
  readonly takeoverTokens: readonly string[];
}

/** The settings of one scenario, as shown to people. */
export interface ScenarioInfo {
  readonly lock: string;
  readonly db: string;
  readonly workers: number;
  readonly iterations: number;
  readonly ttlMs: number;
  readonly pauseMs: number;
  readonly seed: number;
  /** Worker frozen automatically, and on which of its deposits (1-based); null when only the dashboard pauses. */
  readonly pauseWorker: number | null;
  readonly pauseIteration: number | null;
  readonly initialBalance: number;
}

export function depositLabel(d: DepositRef): string {
  return `w${d.worker}#${d.iteration} +${d.amount}`;
}
