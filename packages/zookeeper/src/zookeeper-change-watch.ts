import { callSubscriber } from '@dlock/core/adapter';
import { type Armed, Rearm, type WatchDeps, watchHead } from './rearm.js';
import type { Session } from './zookeeper-session.js';

/** One lock's watch, shared by every subscriber of this service. */
interface ChangeWatch extends Armed {
  readonly listeners: Set<() => void>;
  /** The head node and its data as last read; undefined until the first read on the current session. */
  seen: string | undefined;
  /** The head whose data watch is set and has not fired yet, so a child change need not read its data again. */
  dataWatched: string | undefined;
  /** Its data, for the comparison, while {@link dataWatched} holds. */
  dataSeen: string;
}

/**
 * `LockService.watchChanges`: per lock, a child watch on its parent and a data watch on the queue's head, set again
 * each time one fires, calling back when the head or its data changed (a grant, a release, a lost session, an
 * `updateMetadata`). Waiters joining or leaving behind the head call nobody. One pair of watches per lock name for
 * the whole service, however many subscribe; every subscriber is called once when its subscription is in place.
 * Best effort: a failed read is retried after a second, and every watch is set again, and the head read again, on
 * a new session and after a reconnect.
 */
export class ZooKeeperChangeWatch {
  readonly #watches = new Map<string, ChangeWatch>();
  readonly #rearm: Rearm<ChangeWatch>;

  constructor(deps: WatchDeps) {
    // After a failed read the head's data is read again, whatever watch may have fired meanwhile.
    this.#rearm = new Rearm(
      deps,
      (session, watch) => this.#read(session, watch),
      (watch) => {
        watch.dataWatched = undefined;
      },
    );
  }

  /** How many locks are watched (one server watch pair each), for tests. */
  get size(): number {
    return this.#watches.size;
  }

  add(parent: string, onChange: () => void): () => void {
    let watch = this.#watches.get(parent);
    // A wrapper per subscription: the same callback subscribed twice is two subscriptions.
    const listener = (): void => onChange();
    if (!watch) {
      const made: ChangeWatch = {
        parent,
        listeners: new Set([listener]),
        trigger: (event) => {
          if (!made.active) return;
          if (made.dataWatched !== undefined && pathOf(event) !== made.parent) made.dataWatched = undefined;
          void this.#rearm.arm(made);
        },
        active: true,
        running: false,
        again: false,
        seen: undefined,
        dataWatched: undefined,
        dataSeen: '',
      };
      watch = made;
      this.#watches.set(parent, made);
      void this.#rearm.arm(made);
    } else {
      watch.listeners.add(listener);
      // Already in place: this subscriber's notice is due now. Otherwise the first read gives it to everyone.
      if (watch.seen !== undefined) queueMicrotask(() => callSubscriber(listener));
    }
    const current = watch;
    return () => {
      if (!current.listeners.delete(listener) || current.listeners.size > 0) return;
      // The server keeps the watches until they fire (the 1.1.3 client cannot remove them); they then find this
      // watch inactive and do nothing.
      current.active = false;
      if (this.#watches.get(parent) === current) this.#watches.delete(parent);
    };
  }

  /**
   * A new session has none of the old session's watches, and a reconnect may have hidden changes: set them again and
   * tell every subscriber once they are in place (the head is read again either way).
   */
  rearm(): void {
    for (const watch of this.#watches.values()) {
      watch.seen = undefined;
      watch.dataWatched = undefined;
      void this.#rearm.arm(watch);
    }
  }

  close(): void {
    for (const watch of this.#watches.values()) watch.active = false;
    this.#watches.clear();
  }

  /** Reads the head and its data, leaving both watches set; calls the subscribers if either changed. */
  async #read(session: Session, watch: ChangeWatch): Promise<void> {
    const head = await watchHead(session, watch);
    let state = '';
    if (head !== undefined) {
      if (watch.dataWatched !== head) {
        const read = await session.readNode(`${watch.parent}/${head}`, watch.trigger);
        if (read === null) {
          // Gone between the two reads: the child watch has fired (or will); read the new head.
          watch.again = true;
          return;
        }
        watch.dataWatched = head;
        watch.dataSeen = read.data.toString('base64');
      }
      state = `${head}\n${watch.dataSeen}`;
    }
    if (watch.seen === state) return;
    watch.seen = state;
    for (const listener of [...watch.listeners]) callSubscriber(listener);
  }
}

/** The path a watch event is about (node-zookeeper-client's `Event` has `path`); undefined if it cannot be read. */
function pathOf(event: unknown): string | undefined {
  if (typeof event !== 'object' || event === null) return undefined;
  const path: unknown = Reflect.get(event, 'path');
  return typeof path === 'string' ? path : undefined;
}
