import type { AcquireResult, Lease, RenewRequest, RenewResult } from '@dlock/core';

/**
 * The wire format between a {@link PortLockService} (in a worker thread) and a {@link LockServiceHost} (in the
 * thread that owns the real service). Structured clone carries bigints, so leases cross unchanged.
 */
export type ServiceRequest =
  | {
      readonly id: number;
      readonly op: 'acquire';
      readonly name: string;
      readonly ownerId: string;
      readonly ttlMs: number;
      readonly waitMs: number;
    }
  | { readonly id: number; readonly op: 'renew'; readonly request: RenewRequest }
  | { readonly id: number; readonly op: 'renewMany'; readonly requests: readonly RenewRequest[] }
  | { readonly id: number; readonly op: 'release'; readonly lease: Lease }
  /** The caller gave up on request `id` (an acquire that may be queued on the service). */
  | { readonly id: number; readonly op: 'abort' }
  | { readonly id: number; readonly op: 'watch'; readonly name: string }
  | { readonly id: number; readonly op: 'unwatch' };

export type ServiceReply =
  | {
      readonly id: number;
      readonly ok: true;
      readonly value: AcquireResult | RenewResult | readonly RenewResult[] | boolean;
    }
  | { readonly id: number; readonly ok: false; readonly message: string }
  /** The lock watched under `id` may have become free. */
  | { readonly id: number; readonly released: true };
