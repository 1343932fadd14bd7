import type { Clock } from '@dlock/core';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { queueOrder } from './keys.js';
import type { Session } from './zookeeper-session.js';

interface ReleaseWatch {
  readonly parent: string;
  readonly onReleased: () => void;
  /** One function per subscription: the client registers a watcher once per path however often it is passed. */
  readonly trigger: () => void;
  active: boolean;
  running: boolean;
  again: boolean;
  /** The queue head seen last: when it goes, the lock may be free. */
  head: string | undefined;
}

export interface ZooKeeperReleaseWatchDeps {
  readonly clock: Clock;
  readonly liveSession: () => Promise<Session>;
  /** Aborts when the service closes. */
  readonly closing: AbortSignal;
}

/**
 * `LockService.watch`: a child watch on the lock's parent, re-read on every change, calling back when the head of the
 * queue goes away (a release, a lost session, a waiter that gave up at the head). Best effort: a notice can be
 * missed while disconnected, and a failed read is retried after a second.
 */
export class ZooKeeperReleaseWatch {
  readonly #deps: ZooKeeperReleaseWatchDeps;
  readonly #watches = new Set<ReleaseWatch>();

  constructor(deps: ZooKeeperReleaseWatchDeps) {
    this.#deps = deps;
  }

  add(parent: string, onReleased: () => void): () => void {
    const watch: ReleaseWatch = {
      parent,
      onReleased,
      trigger: () => {
        if (watch.active) void this.#arm(watch);
      },
      active: true,
      running: false,
      again: false,
      head: undefined,
    };
    this.#watches.add(watch);
    void this.#arm(watch);
    return () => {
      watch.active = false;
      this.#watches.delete(watch);
    };
  }

  /** A new session has no watches yet: set them again. */
  rearm(): void {
    for (const watch of this.#watches) void this.#arm(watch);
  }

  close(): void {
    for (const watch of this.#watches) watch.active = false;
    this.#watches.clear();
  }

  async #arm(watch: ReleaseWatch): Promise<void> {
    if (!watch.active) return;
    if (watch.running) {
      watch.again = true;
      return;
    }
    watch.running = true;
    try {
      do {
        watch.again = false;
        await this.#readHead(await this.#deps.liveSession(), watch);
      } while (watch.again && watch.active);
    } catch {
      if (watch.active && !this.#deps.closing.aborted) {
        this.#deps.clock.sleep(1_000, this.#deps.closing, { unref: true }).then(
          () => this.#arm(watch),
          () => {},
        );
      }
    } finally {
      watch.running = false;
    }
  }

  async #readHead(session: Session, watch: ReleaseWatch): Promise<void> {
    let head: string | undefined;
    try {
      head = queueOrder(await session.getChildren(watch.parent, watch.trigger))[0];
    } catch (error) {
      if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
      // No parent yet: watch for its creation; if it appeared meanwhile, read again.
      if ((await session.exists(watch.parent, watch.trigger)) !== null) watch.again = true;
    }
    const previous = watch.head;
    watch.head = head;
    if (previous !== undefined && previous !== head && watch.active) {
      try {
        watch.onReleased();
      } catch {
        // the subscriber's problem; the watch goes on
      }
    }
  }
}
