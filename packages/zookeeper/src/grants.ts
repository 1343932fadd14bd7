import type { Clock, Lease, RenewRequest, RenewResult } from '@dlock/core';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import type { Leftovers } from './leftovers.js';
import type { Session } from './zookeeper-session.js';

/** One grant this process holds (a lock's queue node, a semaphore's slot node) and when the server last confirmed it. */
export interface GrantRecord {
  readonly name: string;
  /** A permit's slot; undefined for a lock. */
  readonly slot?: number;
  /** The grant's ownership token. */
  readonly token: string;
  /** The node's parent and path. */
  readonly parent: string;
  readonly path: string;
  readonly session: Session;
  /** Send time of the last request that proved the node alive; the grant is reaped a session timeout later. */
  confirmedAt: number;
}

/** What differs between the kinds of grant: how their nodes are checked and deleted. */
export interface GrantKind<R extends GrantRecord> {
  /** The grant stops counting as a user of its node's parents (see `ParentUse`). */
  readonly unuse: (record: R) => void;
  /** Splits items (of one session's grants) into the groups one call of {@link alive} checks. */
  readonly batches: <T>(items: readonly T[], recordOf: (item: T) => R) => readonly (readonly T[])[];
  /** Whether each grant's node is still its own; rejects when the server did not answer. */
  readonly alive: (session: Session, records: readonly R[]) => Promise<readonly boolean[]>;
  /** Deletes a reaped grant's node; rejects when that failed. */
  readonly remove: (record: R) => Promise<void>;
  /** Deletes a grant's node in the background. */
  readonly removeLater: (record: R) => void;
}

export interface GrantsDeps<R extends GrantRecord> extends GrantKind<R> {
  readonly clock: Clock;
  readonly leftovers: Leftovers;
  /** Grants known to be gone (reaped, or their node vanished). */
  readonly lost: (ownershipTokens: readonly string[]) => void;
}

const NOT_RENEWED: RenewResult = Object.freeze({ renewed: false });
const NONE: ReadonlySet<never> = new Set();

/**
 * The grants one driver made, by ownership token and by session: what renewals, releases, a tick, a reconnect and
 * a session's end look at. A grant lives as long as its session; each keeps the session's silence watched.
 */
export class Grants<R extends GrantRecord> {
  readonly #deps: GrantsDeps<R>;
  readonly #records = new Map<string, R>();
  readonly #bySession = new Map<Session, Set<R>>();

  constructor(deps: GrantsDeps<R>) {
    this.#deps = deps;
  }

  has(session: Session): boolean {
    return this.#bySession.has(session);
  }

  add(record: R): void {
    this.#records.set(record.token, record);
    const ofSession = this.#bySession.get(record.session);
    if (ofSession) ofSession.add(record);
    else this.#bySession.set(record.session, new Set([record]));
    record.session.engage();
  }

  /** The live grant a lease names; a grant of a session that ended is forgotten on the way. */
  lookup(lease: Lease): R | undefined {
    const record = this.#records.get(lease.ownershipToken);
    if (!record || record.name !== lease.name || record.slot !== lease.slot) return undefined;
    if (record.session.ended) {
      this.forget(record);
      return undefined;
    }
    return record;
  }

  forget(record: R): void {
    if (this.#records.get(record.token) !== record) return;
    this.#records.delete(record.token);
    const ofSession = this.#bySession.get(record.session);
    ofSession?.delete(record);
    if (ofSession?.size === 0) this.#bySession.delete(record.session);
    record.session.disengage();
    this.#deps.unuse(record);
  }

  /** One renewal: `alive` says whether the grant's node is still its own. */
  async renew(request: RenewRequest, alive: (record: R) => Promise<boolean>): Promise<RenewResult> {
    const record = this.lookup(request.lease);
    if (!record) return NOT_RENEWED;
    const sentAt = this.#deps.clock.monotonic();
    return this.#confirm(record, await alive(record), sentAt);
  }

  /** Many renewals, their checks sent in the kind's batches, per session; answers in request order. */
  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    const results: RenewResult[] = requests.map(() => NOT_RENEWED);
    const bySession = new Map<Session, { index: number; record: R }[]>();
    requests.forEach((request, index) => {
      const record = this.lookup(request.lease);
      if (!record) return;
      let group = bySession.get(record.session);
      if (!group) {
        group = [];
        bySession.set(record.session, group);
      }
      group.push({ index, record });
    });
    const checks: Promise<void>[] = [];
    for (const [session, items] of bySession) {
      for (const batch of this.#deps.batches(items, (item) => item.record)) {
        checks.push(this.#renewBatch(session, batch, results));
      }
    }
    await Promise.all(checks);
    return results;
  }

  /**
   * Deletes the grant's node: true if this call deleted it, false if there was nothing of this grant to delete (the
   * node is gone, or its session ended: the node goes with it, or with the leftovers). Rejects only when the
   * outcome is unknown; the handle is released locally all the same, and the node is deleted in the background.
   */
  async release(lease: Lease): Promise<boolean> {
    const record = this.lookup(lease);
    if (!record) return false;
    this.forget(record);
    try {
      // The node is this grant's: its session lives, and no other session can make that node while it exists.
      await record.session.remove(record.path);
      return true;
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return false;
      this.#deps.removeLater(record);
      if (record.session.ended) return false;
      throw error;
    }
  }

  /**
   * After a reconnect under the same session: checks every grant of it on the server at once, rather than at its
   * next renewal, and reports those whose node is gone (deleted by someone while the client was away). A grant is
   * never kept on the strength of the session id alone. Checks that fail to get an answer change nothing; renewals
   * go on asking.
   */
  async verify(session: Session): Promise<void> {
    const records = [...this.#of(session)];
    if (records.length === 0 || session.ended) return;
    const gone: string[] = [];
    await Promise.all(
      this.#deps
        .batches(records, (record) => record)
        .map(async (batch) => {
          const sentAt = this.#deps.clock.monotonic();
          let alive: readonly boolean[];
          try {
            alive = await this.#deps.alive(session, batch);
          } catch {
            return;
          }
          batch.forEach((record, i) => {
            if (this.#records.get(record.token) !== record) return;
            if (alive[i] === true) {
              if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
              return;
            }
            this.forget(record);
            gone.push(record.token);
          });
        }),
    );
    if (gone.length > 0) this.#deps.lost(gone);
  }

  /** Deletes grants nobody renewed for a whole session timeout, as a TTL service would let them expire. */
  async reapOverdue(session: Session): Promise<void> {
    const now = this.#deps.clock.monotonic();
    const reaped: Promise<void>[] = [];
    for (const record of this.#of(session)) {
      if (now - record.confirmedAt >= session.timeoutMs) reaped.push(this.#reap(record));
    }
    if (reaped.length > 0) await Promise.all(reaped);
  }

  /**
   * Forgets every grant of an ended session and returns their tokens, to report lost. A caller's client may keep
   * the session (the adapter gives a session up slightly before the server would): the nodes are then leftovers.
   */
  sessionEnded(session: Session): string[] {
    const tokens: string[] = [];
    for (const record of [...this.#of(session)]) {
      tokens.push(record.token);
      this.forget(record);
      if (!session.owned) this.#deps.leftovers.add(session, record.parent, record.path, undefined);
    }
    return tokens;
  }

  #of(session: Session): ReadonlySet<R> {
    return this.#bySession.get(session) ?? NONE;
  }

  async #renewBatch(
    session: Session,
    batch: readonly { index: number; record: R }[],
    results: RenewResult[],
  ): Promise<void> {
    const sentAt = this.#deps.clock.monotonic();
    const alive = await this.#deps.alive(
      session,
      batch.map((item) => item.record),
    );
    batch.forEach(({ index, record }, i) => {
      results[index] = this.#confirm(record, alive[i] === true, sentAt);
    });
  }

  #confirm(record: R, alive: boolean, sentAt: number): RenewResult {
    if (!alive || record.session.ended || this.#records.get(record.token) !== record) {
      this.forget(record);
      return NOT_RENEWED;
    }
    if (sentAt > record.confirmedAt) record.confirmedAt = sentAt;
    return { renewed: true, ttlMs: record.session.timeoutMs };
  }

  async #reap(record: R): Promise<void> {
    if (this.#records.get(record.token) !== record) return;
    this.forget(record);
    this.#deps.lost([record.token]);
    try {
      await this.#deps.remove(record);
    } catch {
      this.#deps.removeLater(record);
    }
  }
}
