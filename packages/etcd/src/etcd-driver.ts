import type { Clock } from '@dlock/core';
import type { BackgroundRetries } from '@dlock/core/adapter';
import type { KvClientLike } from './client-like.js';
import type { EtcdReleaseWatch } from './etcd-release-watch.js';
import type { EtcdSession, TrackedLease } from './etcd-session.js';
import { type GrantKind, type GrantRecord, Grants } from './grants.js';
import { newServiceId } from './keys.js';
import type { EtcdRequests } from './requests.js';
import { Txns } from './txns.js';
import { type QueueClaim, Waits } from './waits.js';

/** What a driver is built from: the service's clients and the parts every driver shares. */
export interface DriverParts {
  readonly kv: KvClientLike;
  readonly requests: EtcdRequests;
  readonly session: EtcdSession;
  readonly watch: EtcdReleaseWatch;
  readonly cleanups: BackgroundRetries;
  readonly prefix: string;
}

/**
 * What the lock and the semaphore driver share: their transactions (each driver its own, so the revision the lock's
 * `watch` starts from is the lock's), the session, the waits of their queued claims, and the grants they made.
 */
export abstract class EtcdDriver<R extends GrantRecord> {
  readonly grants: Grants<R>;
  protected readonly txns: Txns;
  protected readonly clock: Clock;
  protected readonly session: EtcdSession;
  protected readonly waits: Waits;
  protected readonly prefix: string;
  /** This service's id in every key it names, so no other service's key is ever hit. */
  protected readonly serviceId = newServiceId();

  constructor(parts: DriverParts, kind: GrantKind<R>) {
    this.txns = new Txns(parts.kv, parts.requests);
    this.clock = parts.requests.clock;
    this.session = parts.session;
    this.waits = new Waits(parts.session, this.clock, parts.watch);
    this.prefix = parts.prefix;
    this.grants = new Grants(parts.session, this.txns, parts.cleanups, kind);
  }

  /** The first steps of a leave: the claim stops keeping its lease alive, and its grant (if any) is forgotten. */
  protected abandon(claim: QueueClaim): void {
    this.waits.stop(claim);
    if (claim.token !== undefined) this.grants.forget(claim.token);
  }

  /**
   * Leaves on a lease of its own (or none yet): revoking it deletes every key of the claim in the same raft entry,
   * one try bounded by `requestTimeoutMs` (not shorter: etcd applies it even when its answer is lost, and each
   * timeout counts toward etcd3's per-host circuit breaker). `done` runs however the try ends.
   */
  protected async revokeOwn(lease: TrackedLease | undefined, done: () => void): Promise<void> {
    try {
      if (lease) await this.session.revoke(lease, this.txns.requests.timeoutMs);
    } finally {
      done();
    }
  }
}
