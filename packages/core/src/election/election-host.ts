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
  /** The service said this handle's grant is gone (a refused proclaim): make it lost, as a refused renewal would. */
  lose(handle: LockHandle): void;
}
