import { callSubscriber } from '@dlock/core/adapter';
import { type Armed, Rearm, type WatchDeps, watchHead } from './rearm.js';
import type { Session } from './zookeeper-session.js';

interface ReleaseWatch extends Armed {
  readonly onReleased: () => void;
  /** The queue head seen last: when it goes, the lock may be free. */
  head: string | undefined;
}

/**
 * `LockService.watch`: a child watch on the lock's parent, re-read on every change, calling back when the head of the
 * queue goes away (a release, a lost session, a waiter that gave up at the head). Best effort: a notice can be
 * missed while disconnected, and a failed read is retried after a second.
 */
export class ZooKeeperReleaseWatch {
  readonly #watches = new Set<ReleaseWatch>();
  readonly #rearm: Rearm<ReleaseWatch>;

  constructor(deps: WatchDeps) {
    this.#rearm = new Rearm(deps, (session, watch) => this.#readHead(session, watch));
  }

  add(parent: string, onReleased: () => void): () => void {
    const watch: ReleaseWatch = {
      parent,
      onReleased,
      trigger: () => {
        if (watch.active) void this.#rearm.arm(watch);
      },
      active: true,
      running: false,
      again: false,
      head: undefined,
    };
    this.#watches.add(watch);
    void this.#rearm.arm(watch);
    return () => {
      watch.active = false;
      this.#watches.delete(watch);
    };
  }

  /** A new session has no watches yet: set them again. */
  rearm(): void {
    for (const watch of this.#watches) void this.#rearm.arm(watch);
  }

  close(): void {
    for (const watch of this.#watches) watch.active = false;
    this.#watches.clear();
  }

  async #readHead(session: Session, watch: ReleaseWatch): Promise<void> {
    const head = await watchHead(session, watch);
    const previous = watch.head;
    watch.head = head;
    if (previous !== undefined && previous !== head && watch.active) callSubscriber(watch.onReleased);
  }
}
