import { callSubscriber } from '@dlock/core/adapter';
import type { EtcdReleaseWatch } from './etcd-release-watch.js';
import { lockDirectory, prefixRangeEnd } from './keys.js';

interface Feed {
  readonly listeners: Set<{ readonly onChange: () => void }>;
  readonly cancel: () => void;
}

/**
 * Change notices for `watchChanges`: one etcd watch per lock name, on the lock's whole directory, puts included,
 * shared by every subscriber of this service and cancelled with the last one. Every event may change the holder
 * or its value: a put into an empty directory is a grant, a put on the holder's key is `updateMetadata`, a delete
 * (release, expiry, a waiter leaving) can hand the lock to the next key. A waiter's enqueue is a put too, which
 * costs observers one needless read; telling it apart would cost a read here instead.
 *
 * Subscribers are told once when etcd confirms the watch (and again after the stream resets), so a change between
 * their first read and the watch's creation is never missed for longer than that.
 */
export class ChangeFeeds {
  readonly #watch: EtcdReleaseWatch;
  readonly #prefix: string;
  readonly #feeds = new Map<string, Feed>();

  constructor(watch: EtcdReleaseWatch, prefix: string) {
    this.#watch = watch;
    this.#prefix = prefix;
  }

  subscribe(name: string, onChange: () => void): () => void {
    let feed = this.#feeds.get(name);
    if (!feed) {
      const listeners: Feed['listeners'] = new Set();
      const tell = (): void => {
        // One subscriber's failure must not keep the others from hearing, nor escape into the etcd client.
        for (const listener of [...listeners]) callSubscriber(() => listener.onChange());
      };
      const directory = lockDirectory(this.#prefix, name);
      const cancel = this.#watch.watch(
        { key: directory, rangeEnd: prefixRangeEnd(directory), puts: true },
        { onEvents: tell, onReset: tell, onCreated: tell },
      );
      feed = { listeners, cancel };
      this.#feeds.set(name, feed);
    }
    // A wrapper per call: the same function subscribed twice counts twice, and each unsubscribe removes one.
    const listener = { onChange };
    const current = feed;
    current.listeners.add(listener);
    return () => {
      if (!current.listeners.delete(listener) || current.listeners.size > 0) return;
      if (this.#feeds.get(name) === current) this.#feeds.delete(name);
      current.cancel();
    };
  }

  /** Forgets every feed (the watch hub itself is closed by the service). */
  clear(): void {
    this.#feeds.clear();
  }

  /** How many names have a live watch: for tests. */
  get size(): number {
    return this.#feeds.size;
  }
}
