import type { Clock } from '@dlock/core';
import { callSubscriber } from '@dlock/core/adapter';
import type { RedisConnection, RedisSubscription } from '../clients/connection.js';
import { redlockKeys } from '../keys.js';

interface Channel {
  readonly listeners: Set<() => void>;
  /** Every node publishes the same notice for one release; only the first copy is delivered. */
  lastNotice: string | undefined;
  /** Set once the first node confirmed the subscription. */
  active: boolean;
  readonly onMessage: (message: string) => void;
}

/**
 * Release notices for `watch`: one lazily opened subscriber connection per node (a duplicate of the node's client),
 * one channel per watched name, shared by every watcher of that name in this service.
 *
 * A release publishes on every node it deleted from; a watcher hears it from whichever node answers first. Expiry
 * publishes nothing (no keyspace notifications are assumed), so waiters also sleep until the holder's TTL hint.
 * When a channel's subscription becomes active its watchers are woken once: a release that happened while the
 * subscription was being set up would otherwise be missed, and a spurious wake only costs one extra attempt.
 *
 * Each watcher is woken after its own random delay of up to `jitterMs()`: waiters that all claim the moment a
 * notice arrives each win the nodes nearest to them, split the nodes, and fail together (a livelock when the nodes
 * are at different distances).
 */
export class RedlockReleaseWatch {
  readonly #clients: readonly RedisConnection[];
  readonly #prefix: string;
  readonly #subscribers: (Promise<RedisSubscription> | undefined)[];
  readonly #opened = new Set<RedisSubscription>();
  readonly #channels = new Map<string, Channel>();
  readonly #clock: Clock;
  readonly #jitterMs: () => number;
  #closed = false;

  constructor(
    clients: readonly RedisConnection[],
    prefix: string,
    options: { readonly clock: Clock; readonly jitterMs: () => number },
  ) {
    this.#clients = clients;
    this.#prefix = prefix;
    this.#subscribers = clients.map(() => undefined);
    this.#clock = options.clock;
    this.#jitterMs = options.jitterMs;
  }

  watch(name: string, onReleased: () => void): () => void {
    if (this.#closed) return () => {};
    const key = redlockKeys(this.#prefix, name).released;
    let channel = this.#channels.get(key);
    if (!channel) {
      const created: Channel = {
        listeners: new Set(),
        lastNotice: undefined,
        active: false,
        onMessage: (message: unknown) => {
          // Anything but a string is not ours (a foreign publisher, a client with another reply mapping): ignored.
          if (typeof message !== 'string' || message === created.lastNotice) return;
          created.lastNotice = message;
          this.#deliver(created);
        },
      };
      channel = created;
      this.#channels.set(key, channel);
      this.#subscribeAll(key, channel);
    }
    // A function of its own per watch, so the same callback watched twice needs two unsubscribes.
    const listener = (): void => onReleased();
    channel.listeners.add(listener);
    const current = channel;
    return () => {
      current.listeners.delete(listener);
      if (current.listeners.size > 0 || this.#channels.get(key) !== current) return;
      this.#channels.delete(key);
      for (const subscriber of this.#subscribers) {
        subscriber?.then((s) => s.unsubscribe(key, current.onMessage)).catch(() => {});
      }
    };
  }

  /** Closes the subscriber connections this object opened. The nodes' own clients stay the caller's. */
  close(): void {
    this.#closed = true;
    this.#channels.clear();
    for (const subscriber of this.#opened) subscriber.destroy();
    this.#opened.clear();
  }

  // Listeners run through callSubscriber: one that throws or rejects (an async one type-checks as () => void) must
  // not starve the others nor end the process; core wraps its own callbacks and reports their errors.
  #deliver(channel: Channel): void {
    const jitterMs = this.#jitterMs();
    for (const listener of [...channel.listeners]) {
      const delay = this.#clock.random() * jitterMs;
      if (delay < 1) {
        callSubscriber(listener);
        continue;
      }
      // Unref'd: a waiter's own sleep keeps the process alive; a watcher that left meanwhile is not called.
      this.#clock.sleep(delay, undefined, { unref: true }).then(
        () => {
          if (channel.listeners.has(listener)) callSubscriber(listener);
        },
        () => {},
      );
    }
  }

  #subscribeAll(key: string, channel: Channel): void {
    for (let i = 0; i < this.#clients.length; i++) {
      this.#subscriber(i)
        .then(async (subscriber) => {
          await subscriber.subscribe(key, channel.onMessage);
          if (this.#channels.get(key) !== channel) {
            // Everyone unwatched while this subscription was being set up.
            await subscriber.unsubscribe(key, channel.onMessage);
            return;
          }
          if (!channel.active) {
            channel.active = true;
            this.#deliver(channel);
          }
        })
        // Best effort: a node that cannot be subscribed to leaves its waiters to the TTL hint and backoff.
        .catch(() => {});
    }
  }

  #subscriber(index: number): Promise<RedisSubscription> {
    const existing = this.#subscribers[index];
    if (existing) return existing;
    if (this.#closed) return Promise.reject(new Error('closed'));
    const opening = (async () => {
      const subscriber = (this.#clients[index] as RedisConnection).duplicate();
      // A subscriber that loses its node reconnects (and resubscribes) on its own; the adapter listens to its errors.
      this.#opened.add(subscriber);
      try {
        await subscriber.connect();
      } catch (error) {
        this.#opened.delete(subscriber);
        subscriber.destroy();
        throw error;
      }
      if (this.#closed) {
        subscriber.destroy();
        throw new Error('closed');
      }
      return subscriber;
    })();
    this.#subscribers[index] = opening;
    opening.catch(() => {
      if (this.#subscribers[index] === opening) this.#subscribers[index] = undefined;
    });
    return opening;
  }
}
