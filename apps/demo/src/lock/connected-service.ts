import type { LockService } from '@dlock/core';

/** A lock service a worker uses, and how to let go of its connection. */
export interface ConnectedService {
  readonly service: LockService;
  close(): Promise<void>;
}
