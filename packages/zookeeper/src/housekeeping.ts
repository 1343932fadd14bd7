import type { Clock } from '@dlock/core';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { isNodeOfAttempt } from './keys.js';
import type { Session } from './zookeeper-session.js';

const CLEANUP_TRIES = 6;

/** A node that must go: `path`, or else every node of `attemptId` under `parent`. */
interface Cleanup {
  readonly session: Session;
  readonly parent: string;
  readonly path: string | undefined;
  readonly attemptId: string | undefined;
  tries: number;
  dueAt: number;
  running: boolean;
}

/** Takes over the nodes of a session that ended, which may outlive it on a caller's client. */
export type Orphaned = (
  session: Session,
  parent: string,
  path: string | undefined,
  attemptId: string | undefined,
) => void;

/**
 * Nodes deleted in the background while their session lives (Curator's "guaranteed delete"): a released node whose
 * delete failed, a create that succeeded after its caller gave up, the possible node of an attempt whose create
 * went unanswered. Each job tries a few times with growing pauses. A session's jobs end with it; they are handed to
 * `orphaned`, since the session's nodes go with it only on the server's say.
 */
export class Cleanups {
  readonly #clock: Clock;
  readonly #orphaned: Orphaned;
  readonly #jobs = new Set<Cleanup>();

  constructor(clock: Clock, orphaned: Orphaned) {
    this.#clock = clock;
    this.#orphaned = orphaned;
  }

  get size(): number {
    return this.#jobs.size;
  }

  schedule(session: Session, parent: string, path: string | undefined, attemptId: string | undefined): void {
    if (session.ended) {
      this.#orphaned(session, parent, path, attemptId);
      return;
    }
    this.#jobs.add({ session, parent, path, attemptId, tries: 0, dueAt: 0, running: false });
    // A pending cleanup keeps the session's silence watched, as a grant does (and wakes the ticker).
    session.engage();
  }

  /** Drops every job (of one session, or all); the jobs of an ended session go to `orphaned`. */
  drop(session?: Session): void {
    for (const job of this.#jobs) if (!session || job.session === session) this.#drop(job);
  }

  /** Starts the jobs that are due; called on each housekeeping tick. */
  run(now: number): void {
    for (const job of this.#jobs) {
      if (job.session.ended) {
        this.#drop(job);
        continue;
      }
      if (job.running || now < job.dueAt) continue;
      job.running = true;
      void this.#attempt(job).then((done) => {
        job.running = false;
        job.tries += 1;
        if (done || job.tries >= CLEANUP_TRIES) this.#drop(job, !done);
        else job.dueAt = this.#clock.monotonic() + 200 * 2 ** job.tries;
      });
    }
  }

  #drop(job: Cleanup, pending = true): void {
    if (!this.#jobs.delete(job)) return;
    job.session.disengage();
    if (pending && job.session.ended) this.#orphaned(job.session, job.parent, job.path, job.attemptId);
  }

  async #attempt(job: Cleanup): Promise<boolean> {
    const { session, parent, attemptId } = job;
    try {
      const paths =
        job.path !== undefined
          ? [job.path]
          : (await session.getChildren(parent))
              .filter((child) => attemptId !== undefined && isNodeOfAttempt(child, attemptId))
              .map((child) => `${parent}/${child}`);
      await Promise.all(
        paths.map((path) =>
          session.remove(path).catch((error: unknown) => {
            if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
          }),
        ),
      );
      return true;
    } catch (error) {
      return zkErrorCode(error) === ZK_ERROR.NO_NODE;
    }
  }
}

/**
 * Which lock parents this service uses (attempts and grants per parent), and which have been idle long enough to
 * delete. Parent nodes would otherwise pile up forever, one per lock name ever used: the 1.1.3 client cannot make
 * container nodes, which ZooKeeper would delete by itself.
 */
export class ParentUse {
  readonly #clock: Clock;
  readonly #idleMs: number;
  readonly #wake: () => void;
  readonly #users = new Map<string, number>();
  readonly #idleSince = new Map<string, number>();

  constructor(clock: Clock, idleMs: number, wake: () => void) {
    this.#clock = clock;
    this.#idleMs = idleMs;
    this.#wake = wake;
  }

  /** Parents waiting for their idle time to pass. */
  get idle(): number {
    return this.#idleSince.size;
  }

  /** True while this service uses the parent or will delete it itself once idle. */
  knows(parent: string): boolean {
    return this.#users.has(parent) || this.#idleSince.has(parent);
  }

  use(parent: string): void {
    this.#users.set(parent, (this.#users.get(parent) ?? 0) + 1);
    this.#idleSince.delete(parent);
  }

  unuse(parent: string): void {
    const count = (this.#users.get(parent) ?? 1) - 1;
    if (count > 0) {
      this.#users.set(parent, count);
      return;
    }
    this.#users.delete(parent);
    this.#idleSince.set(parent, this.#clock.monotonic() + this.#idleMs);
    this.#wake();
  }

  /** Removes and returns the parents whose idle time has passed (all idle ones with `now` = Infinity). */
  takeDue(now: number): string[] {
    const due: string[] = [];
    for (const [parent, dueAt] of this.#idleSince) {
      if (now < dueAt) continue;
      this.#idleSince.delete(parent);
      due.push(parent);
    }
    return due;
  }
}

/**
 * One unref'd timer for all of a service's housekeeping: heartbeats, local session-expiry detection, reaping
 * unrenewed leases and removing idle parents. It runs while `tick()` says there is work and stops by itself when
 * idle; `wake()` restarts it. (Call deadlines are core's `CallDeadlines`, which keep their own single timer.)
 */
export class Ticker {
  readonly #clock: Clock;
  readonly #intervalMs: () => number;
  readonly #tick: () => boolean;
  #running: AbortController | undefined;
  #closed = false;

  constructor(clock: Clock, intervalMs: () => number, tick: () => boolean) {
    this.#clock = clock;
    this.#intervalMs = intervalMs;
    this.#tick = tick;
  }

  wake(): void {
    if (this.#running || this.#closed) return;
    const controller = new AbortController();
    this.#running = controller;
    void this.#run(controller);
  }

  close(): void {
    this.#closed = true;
    this.#running?.abort();
    this.#running = undefined;
  }

  async #run(controller: AbortController): Promise<void> {
    try {
      for (;;) {
        await this.#clock.sleep(this.#intervalMs(), controller.signal, { unref: true });
        let more: boolean;
        try {
          more = this.#tick();
        } catch (error) {
          // A bug in housekeeping must not stop the session's liveness checks.
          process.emitWarning(`@dlock/zookeeper: housekeeping failed: ${String(error)}`, 'DLockWarning');
          more = true;
        }
        if (!more) break;
      }
    } catch {
      // aborted by close()
    } finally {
      if (this.#running === controller) this.#running = undefined;
    }
  }
}
