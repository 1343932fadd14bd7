import type { Clock } from '@dlock/core';
import { callSubscriber } from '@dlock/core/adapter';
import type { MessageListener, RedisConnection, RedisSubscription } from '../clients/connection.js';
import type { Deadlines } from './deadlines.js';
import { Waiter } from './waiter.js';

/** A hand-off message: "<ownership token> <fencing token>", then " <slot>" for a semaphore's. */
const HAND_OFF = /^(\S+) (\d+)(?: (\d+))?$/;

function destroyQuietly(sub: RedisSubscription): void {
  try {
    sub.destroy();
  } catch {
    // already closed: the state we wanted anyway
  }
}

export interface ReleaseWatchOptions {
  readonly client: RedisConnection;
  /** A subscriber the caller owns; without one the watch duplicates `client` and owns that connection. */
  readonly subscriber: RedisSubscription | undefined;
  /**
   * This service's own channel on a single node: grants handed to its queued waiters arrive here. On a cluster a
   * notice can only travel in its lock's slot, so each lock has a wake channel per service, joined while waiting.
   */
  readonly channel: string;
  readonly deadlines: Deadlines;
  readonly clock: Clock;
  readonly timeoutMs: number;
}

/**
 * The one subscriber connection of a service, and the notices it brings. It carries the service's own channel
 * (hand-offs to queued waiters: one message to one process per release, delivered to that waiter's mailbox) and,
 * reference-counted, the release channels of names someone `watch`es and the change channels of names someone
 * observes (`watchChanges`, for elections): one subscription per channel however many callers share it. Pub/sub is
 * best effort: every wait it serves also has a timer of its own.
 */
export class RedisReleaseWatch {
  readonly #options: ReleaseWatchOptions;
  readonly #watchers = new Map<
    string,
    {
      readonly callbacks: Set<() => void>;
      readonly listener: MessageListener;
      /** Marks the name watched in Redis (see `watch`). */
      readonly mark: (() => Promise<unknown>) | undefined;
      /**
       * Woken again whenever the subscription comes back: notices sent while it was away are lost, and a change
       * watcher (unlike a release watcher, whose callback may be the caller's own) just reads the state again.
       */
      readonly rewake: boolean;
    }
  >();
  #subscriber: RedisSubscription | undefined;
  /** Connections whose reconnects mark the watched names again (see `watch`). */
  readonly #remarking = new WeakSet<RedisSubscription>();
  #offReconnect: (() => void) | undefined;
  #ready: Promise<void> | undefined;
  /** The service channel is subscribed on the current connection. */
  #subscribed = false;
  /** When `ready()` last gave up waiting; while set, it answers at once and retries in the background. */
  #degradedSince: number | undefined;
  #closed = false;
  /** Mailboxes of this service's queued waiters, by ownership token. */
  readonly #waiters = new Map<string, Waiter>();
  /** Cluster: the per-lock wake channels joined, with how many queued acquires use each. */
  readonly #joined = new Map<string, { count: number; subscribed: Promise<unknown> }>();
  /** The connect of a subscriber this watch made, awaited before subscribing sharded channels. */
  #connecting: Promise<void> | undefined;
  // The subscriber (re)connected: messages sent while it was down are lost, so every waiter looks again.
  readonly #onReady = (): void => {
    for (const waiter of this.#waiters.values()) waiter.deliver({ kind: 'recheck' });
  };
  // Called by the client library: an exception here would escape into its socket handler and crash the process.
  readonly #onGrant: MessageListener = (message) => {
    try {
      this.#handOff(message);
    } catch {
      // A message we cannot use is not ours: ignored.
    }
  };

  constructor(options: ReleaseWatchOptions) {
    this.#options = options;
  }

  /**
   * Resolves true once the service channel is subscribed, false if that did not happen within `timeoutMs`
   * (the caller then waits without queueing). Starts the subscriber on first use.
   */
  async ready(timeoutMs: number): Promise<boolean> {
    if (this.#closed) return false;
    if (this.#subscribed) return true;
    if (this.#degradedSince !== undefined) {
      // Waiting again would hold up every acquire by the same timeout while the subscriber cannot connect: answer
      // at once (the caller waits without queueing) and retry in the background, at most once per timeout.
      if (
        this.#ready === undefined &&
        this.#options.clock.monotonic() - this.#degradedSince >= this.#options.timeoutMs
      ) {
        this.#degradedSince = this.#options.clock.monotonic();
        this.#ready = this.#start();
        this.#ready.catch(() => {});
      }
      return false;
    }
    this.#ready ??= this.#start();
    try {
      await this.#options.deadlines.bound(this.#ready, timeoutMs, 'subscribing to the wake-up channel');
      return true;
    } catch {
      this.#degradedSince = this.#options.clock.monotonic();
      return false;
    }
  }

  /**
   * Cluster: subscribes this service to `channel` (a lock's wake channel, reference-counted) before a claim may
   * queue there. False when that did not happen within `timeoutMs` (the caller then waits without queueing).
   */
  async join(channel: string, timeoutMs: number): Promise<boolean> {
    if (!(await this.ready(timeoutMs))) return false;
    let entry = this.#joined.get(channel);
    if (!entry) {
      const sub = this.#subscriberNow();
      const subscribed = sub.subscribe(channel, this.#onGrant);
      subscribed.catch(() => {});
      entry = { count: 0, subscribed };
      this.#joined.set(channel, entry);
    }
    entry.count++;
    try {
      await this.#options.deadlines.bound(entry.subscribed, timeoutMs, 'subscribing to the wake-up channel');
      return true;
    } catch {
      this.part(channel);
      return false;
    }
  }

  /** Undoes one `join`; the last one unsubscribes. */
  part(channel: string): void {
    const entry = this.#joined.get(channel);
    if (!entry || --entry.count > 0) return;
    this.#joined.delete(channel);
    const sub = this.#subscriber;
    if (sub && !this.#closed) {
      this.#options.deadlines
        .bound(sub.unsubscribe(channel, this.#onGrant), this.#options.timeoutMs, 'unsubscribe')
        .catch(() => {});
    }
  }

  /**
   * A mailbox for the queued waiter `owner`, registered before its script runs: the hand-off message may arrive
   * before the script's own reply.
   */
  register(owner: string): Waiter {
    const waiter = new Waiter(this.#options.clock);
    if (!this.#closed) this.#waiters.set(owner, waiter);
    return waiter;
  }

  unregister(owner: string): void {
    this.#waiters.delete(owner);
  }

  /**
   * Subscribes `callback` to `channel` (reference-counted). Best effort; returns the unsubscribe function. `mark`
   * tells Redis that the name is watched: releases publish on its channel only while it is marked, and a notice
   * that reached nobody unmarks it. So it runs once the first subscription is in place, and again after the
   * subscriber reconnected.
   */
  watch(channel: string, callback: () => void, mark?: () => Promise<unknown>, rewake = false): () => void {
    let entry = this.#watchers.get(channel);
    if (!entry) {
      const callbacks = new Set<() => void>();
      const listener: MessageListener = () => {
        // One throwing or rejecting watcher must neither starve the others nor escape into the client library.
        for (const cb of [...callbacks]) callSubscriber(cb);
      };
      const fresh = { callbacks, listener, mark, rewake };
      entry = fresh;
      this.#quietly((sub) => {
        // Registered only now: a connection created just before has subscribed the names already watched.
        this.#watchers.set(channel, fresh);
        this.#remarkOnReconnect(sub);
        return sub
          .subscribe(channel, listener)
          .then(() => this.#marked(mark))
          .then(() => {
            // A release between the caller's refused attempt and this moment published nothing we could hear:
            // wake the watchers once now that notices flow (the SPI's rule; a spurious wake costs one attempt).
            if (this.#watchers.get(channel) === fresh) listener('');
          });
      });
    }
    const { callbacks, listener } = entry;
    const own = (): void => callback();
    callbacks.add(own);
    return () => {
      if (!callbacks.delete(own) || callbacks.size > 0) return;
      if (this.#watchers.get(channel)?.listener !== listener) return;
      this.#watchers.delete(channel);
      const sub = this.#subscriber;
      if (sub && !this.#closed) {
        this.#options.deadlines
          .bound(sub.unsubscribe(channel, listener), this.#options.timeoutMs, 'unsubscribe')
          .catch(() => {});
      }
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const sub = this.#subscriber;
    this.#subscriber = undefined;
    const watched = [...this.#watchers];
    const joined = [...this.#joined.keys()];
    this.#watchers.clear();
    this.#joined.clear();
    this.#waiters.clear();
    if (!sub) return;
    this.#offReconnect?.();
    if (this.#options.subscriber) {
      // Not ours to close: take all our channels off it (the wake-up channel and every watched release channel),
      // without waiting long for a server that may be gone.
      if (sub.isOpen) {
        const bound = (pending: Promise<unknown>): Promise<unknown> =>
          this.#options.deadlines.bound(pending, this.#options.timeoutMs, 'unsubscribe').catch(() => {});
        await Promise.all([
          bound(sub.unsubscribe(this.#options.channel, this.#onGrant)),
          ...joined.map((channel) => bound(sub.unsubscribe(channel, this.#onGrant))),
          ...watched.map(([channel, { listener }]) => bound(sub.unsubscribe(channel, listener))),
        ]);
      }
      sub.detach();
      return;
    }
    if (!sub.isOpen) return;
    await this.#options.deadlines
      .bound(sub.close(), this.#options.timeoutMs, 'closing the subscriber')
      .catch(() => destroyQuietly(sub));
  }

  #subscriberNow(): RedisSubscription {
    if (this.#subscriber) return this.#subscriber;
    const own = this.#options.subscriber === undefined;
    const sub = this.#options.subscriber ?? this.#options.client.duplicate();
    if (own) {
      const connecting = sub.connect();
      this.#connecting = connecting;
      connecting.catch(() => {
        // A failed first connect shows up as ready() returning false; the next ready() starts afresh.
        if (this.#subscriber === sub) this.#reset(sub);
      });
    } else {
      this.#connecting = undefined;
    }
    this.#subscriber = sub;
    // A replacement connection takes over the names already watched and the wake channels joined.
    for (const [channel, entry] of this.#watchers) {
      this.#remarkOnReconnect(sub);
      this.#quietly(() =>
        sub.subscribe(channel, entry.listener).then(() => {
          if (entry.rewake) this.#rewake(channel, entry);
          else this.#markQuietly(entry.mark);
        }),
      );
    }
    for (const [channel, entry] of this.#joined) {
      entry.subscribed = sub.subscribe(channel, this.#onGrant);
      entry.subscribed.catch(() => {});
    }
    return sub;
  }

  #reset(sub: RedisSubscription): void {
    this.#subscriber = undefined;
    this.#ready = undefined;
    this.#subscribed = false;
    this.#offReconnect?.();
    this.#offReconnect = undefined;
    if (!this.#options.subscriber) {
      sub.detach();
      destroyQuietly(sub);
    }
  }

  async #start(): Promise<void> {
    const sub = this.#subscriberNow();
    try {
      // A cluster has no service-wide wake channel: only the connection is made here (see `join`).
      if (this.#options.client.cluster) await this.#connecting;
      else await sub.subscribe(this.#options.channel, this.#onGrant);
    } catch (error) {
      if (this.#subscriber === sub) this.#reset(sub);
      throw error;
    }
    // Only after the first subscription: a 'ready' from now on is a reconnect (node-redis has resubscribed by then).
    if (!this.#closed && this.#subscriber === sub) {
      this.#subscribed = true;
      this.#degradedSince = undefined;
      this.#offReconnect = sub.onReconnect(this.#onReady);
    }
  }

  /** A message on the service channel. Anyone who can PUBLISH can write there: it must expect anything. */
  #handOff(message: unknown): void {
    // Only "<token> <decimal fence>[ <decimal slot>]" is a hand-off.
    if (typeof message !== 'string') return;
    const match = HAND_OFF.exec(message);
    if (match === null) return;
    const [, owner, fence, slot] = match as unknown as [string, string, string, string | undefined];
    // No waiter: it left (abort, deadline) and its own leave script gives the lock back; nothing to do here.
    this.#waiters.get(owner)?.deliver({
      kind: 'granted',
      fence: BigInt(fence),
      slot: slot === undefined ? undefined : Number(slot),
    });
  }

  #quietly(action: (sub: RedisSubscription) => Promise<unknown>): void {
    if (this.#closed) return;
    let pending: Promise<unknown>;
    try {
      pending = action(this.#subscriberNow());
    } catch (error) {
      pending = Promise.reject(error);
    }
    this.#options.deadlines.bound(pending, this.#options.timeoutMs, 'subscribe').catch(() => {});
  }

  /**
   * A release while the subscriber was away found nobody listening and unmarked its name: every reconnect of a
   * connection that carries watches marks the watched names again (whether or not anyone queues through it).
   */
  #remarkOnReconnect(sub: RedisSubscription): void {
    if (this.#remarking.has(sub)) return;
    this.#remarking.add(sub);
    sub.onReconnect(() => {
      for (const [channel, entry] of this.#watchers) {
        if (entry.rewake) this.#rewake(channel, entry);
        else this.#markQuietly(entry.mark);
      }
    });
  }

  /** Marks the name again, then wakes its watchers once (if they still watch through this entry). */
  #rewake(
    channel: string,
    entry: { readonly listener: MessageListener; readonly mark?: (() => Promise<unknown>) | undefined },
  ): void {
    void this.#marked(entry.mark).then(() => {
      if (this.#watchers.get(channel)?.listener === entry.listener) entry.listener('');
    });
  }

  /** `mark`, settled either way: a failed mark only costs notices until the next one. */
  async #marked(mark: (() => Promise<unknown>) | undefined): Promise<void> {
    if (mark === undefined || this.#closed) return;
    try {
      await mark();
    } catch {
      // as above
    }
  }

  /** Best effort, bounded by the caller; it must not throw into the client library's event handlers. */
  #markQuietly(mark: (() => Promise<unknown>) | undefined): void {
    if (mark === undefined || this.#closed) return;
    try {
      mark().catch(() => {});
    } catch {
      // a failed mark only costs notices until the next one
    }
  }
}
