import type { Clock } from '@dlock/core';
import type { ZooKeeperWatcher } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { queueOrder } from './keys.js';
import type { Session } from './zookeeper-session.js';

export interface WatchDeps {
  readonly clock: Clock;
  readonly liveSession: () => Promise<Session>;
  /** Aborts when the service closes. */
  readonly closing: AbortSignal;
}

/** A watch on one lock's parent, as its re-arm loop keeps it. */
export interface Armed {
  readonly parent: string;
  /** One function per watch: the client registers a watcher once per path and kind however often it is passed. */
  readonly trigger: ZooKeeperWatcher;
  active: boolean;
  running: boolean;
  again: boolean;
}

/**
 * Keeps the server watches of the release and change watches set: each read sets them, and is done again while a
 * change came in meanwhile (one read at a time per watch). A read that fails is tried again after a second, until
 * the watch or the service is closed; `failed` first forgets whatever the watch may have missed.
 */
export class Rearm<W extends Armed> {
  readonly #deps: WatchDeps;
  readonly #read: (session: Session, watch: W) => Promise<void>;
  readonly #failed: ((watch: W) => void) | undefined;

  constructor(
    deps: WatchDeps,
    read: (session: Session, watch: W) => Promise<void>,
    failed?: (watch: W) => void,
  ) {
    this.#deps = deps;
    this.#read = read;
    this.#failed = failed;
  }

  async arm(watch: W): Promise<void> {
    if (!watch.active) return;
    if (watch.running) {
      watch.again = true;
      return;
    }
    watch.running = true;
    try {
      do {
        watch.again = false;
        await this.#read(await this.#deps.liveSession(), watch);
      } while (watch.again && watch.active);
    } catch {
      if (watch.active && !this.#deps.closing.aborted) {
        this.#failed?.(watch);
        this.#deps.clock.sleep(1_000, this.#deps.closing, { unref: true }).then(
          () => this.arm(watch),
          () => {},
        );
      }
    } finally {
      watch.running = false;
    }
  }
}

/**
 * The head of the lock's queue, leaving a child watch on its parent. No parent yet: a watch for its creation, and
 * if it appeared meanwhile, `again`.
 */
export async function watchHead(session: Session, watch: Armed): Promise<string | undefined> {
  try {
    return queueOrder(await session.getChildren(watch.parent, watch.trigger))[0];
  } catch (error) {
    if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
    if ((await session.exists(watch.parent, watch.trigger)) !== null) watch.again = true;
    return undefined;
  }
}
