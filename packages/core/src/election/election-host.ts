import type { Clock } from '../clock.js';
import type { LockHandle } from '../handle.js';
import type { AcquireOptions } from '../options.js';
import type { LockService } from '../service.js';

/**
 * What an election needs from the `LockClient` that made it: its locks (a leadership is a lock handle whose grant
 * carries the leader's value), its service for reads, and its call bounds, so that every election call settles within
 * the client's `operationTimeoutMs`, keeps the process alive until it does and is settled by `close()`.
 */
export interface ElectionHost {
  readonly clock: Clock;
  readonly ownerId: string;
  readonly service: LockService;
  /** Aborts when the client closes. */
  readonly closing: AbortSignal;
  acquire(name: string, options: AcquireOptions): Promise<LockHandle>;
  /** Runs one service call bounded by `operationTimeoutMs`, tracked like every public call of the client. */
  call<T>(fn: () => Promise<T>, what: string): Promise<T>;
  assertOpen(): void;
  /**
   * Makes a held handle lost: `rejected` when the service said its grant is gone (a refused proclaim, as a refused
   * renewal would), `expired` when its window closed first.
   */
  lose(handle: LockHandle, reason: 'rejected' | 'expired'): void;
}
