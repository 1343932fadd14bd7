// The shapes a soak worker and the test that runs it agree on. Structural on purpose: test-utils does not depend on
// @dlock/core, so a backend's fixture hands the worker its LockClient and these are all the worker asks of it.

import type { HoldRecord } from './semaphore-history.js';

/** What a soak worker needs of a permit (a `@dlock/core` Permit has all of it). */
export interface SoakPermit {
  readonly slot: number;
  readonly fencingToken: bigint;
  /** End of the validity window on the client's monotonic clock (`performance.now()`). */
  readonly expiresAt: number;
  readonly signal: AbortSignal;
  release(): Promise<void>;
}

export interface SoakSemaphore {
  acquire(options: { waitMs: number; signal?: AbortSignal }): Promise<SoakPermit>;
}

/** A `@dlock/core` LockClient, as far as a soak worker uses it. */
export interface SoakClient {
  semaphore(name: string, options: { permits: number; ttlMs: number }): SoakSemaphore;
}

/** What a backend's fixture module makes, given the test's `config`: a client on its service, and how to close both. */
export interface SoakBackend {
  readonly client: SoakClient;
  close(): Promise<void>;
}

/** The default export of a backend's fixture module. */
export type SoakBackendFactory = (config: Readonly<Record<string, unknown>>) => Promise<SoakBackend>;

/** What one soak process is told (one JSON argument). */
export interface SoakWorkerSpec {
  /** File URL of the backend's fixture module. */
  readonly factory: string;
  /** Passed to the factory as is (server address, key prefix, …). */
  readonly config: Readonly<Record<string, unknown>>;
  /** Names this process in every record. */
  readonly label: string;
  readonly name: string;
  readonly permits: number;
  readonly ttlMs: number;
  readonly workers: number;
  /** The process stops asking for permits after this long, lets go of what it holds, and exits. */
  readonly durationMs: number;
  /** Each acquire's budget. */
  readonly waitMs: number;
  /** Each hold lasts a random time in [holdMinMs, holdMaxMs] (cut short at the end of the duration). */
  readonly holdMinMs: number;
  readonly holdMaxMs: number;
}

/** One line a soak process writes to stdout. */
export type SoakLine =
  | ({ readonly type: 'hold' } & HoldRecord)
  | {
      readonly type: 'acquired';
      readonly process: string;
      readonly worker: number;
      readonly slot: number;
      readonly token: string;
      readonly at: number;
    }
  | { readonly type: 'ready'; readonly process: string; readonly pid: number }
  | {
      readonly type: 'summary';
      readonly process: string;
      readonly holds: number;
      /** Failed acquires by error code (or name). */
      readonly errors: Readonly<Record<string, number>>;
      /** Failed releases by error code (or name). */
      readonly releaseErrors: Readonly<Record<string, number>>;
    }
  | { readonly type: 'fatal'; readonly process: string; readonly message: string };

/**
 * Milliseconds on the machine's monotonic clock (CLOCK_MONOTONIC through `process.hrtime`): one clock for every
 * process on the machine, which neither a wall-clock step nor a SIGSTOP of the reader disturbs.
 */
export function machineMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}
