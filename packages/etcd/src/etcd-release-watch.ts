import { callSubscriber } from '@dlock/core/adapter';
import type {
  DuplexStreamLike,
  WatchClientLike,
  WatchEventLike,
  WatchRequestLike,
  WatchResponseLike,
} from './client-like.js';
import { closeStream, type EtcdRequests, later } from './requests.js';

type WatchStream = DuplexStreamLike<WatchRequestLike, WatchResponseLike>;

export interface WatchSpec {
  readonly key: Buffer;
  /** Watches `[key, rangeEnd)`; without it, the one key. */
  readonly rangeEnd?: Buffer;
  /** First revision to report; without it, from the moment the watch is created. */
  readonly startRevision?: bigint;
  /** Report puts too (by default etcd filters them out). */
  readonly puts?: boolean;
}

export interface WatchListener {
  /** The delete events of each batch that has any. */
  onDeletes?(events: readonly WatchEventLike[]): void;
  /** Every batch of events (puts only if the spec asked for them). */
  onEvents?(events: readonly WatchEventLike[]): void;
  /**
   * etcd confirmed the watch (again, after a reset): from here no event is missed. An owner that read the keys
   * before this reads them again.
   */
  onCreated?(): void;
  /**
   * The stream broke or etcd cancelled the watch: events may have been missed until it is re-created (it is, from
   * the revision after the last one seen). Owners that cannot afford a miss re-read the keys they care about.
   */
  onReset?(): void;
}

interface Registration {
  readonly spec: WatchSpec;
  readonly listener: WatchListener;
  /** Id on the current stream; a new one per (re)creation, so a stale answer never reaches a newer watch. */
  watchId: string | undefined;
  /** Resume point after a reconnect. */
  nextRevision: bigint | undefined;
  /** Pending re-creation after etcd refused the watch (cancels it). */
  retry: (() => void) | undefined;
  /** Delay before the next re-creation after a refusal: doubles per refusal in a row, up to MAX_BACKOFF_MS. */
  refusedBackoffMs: number;
  /** Refused since it was last created: a first refusal renews the stream, a later one waits out the backoff. */
  refused: boolean;
}

/** etcd's id for "no watch": the answer to a create it refused (for permission) before giving the watch an id. */
const NO_WATCH_ID = '-1';

const IDLE_CLOSE_MS = 2_000;
const MAX_BACKOFF_MS = 2_000;

/**
 * Release notices: deletes of lock keys, for the service's `watch()` (a lock's whole directory) and for queued
 * contenders (the one key just ahead of theirs); and change notices (puts too) for `watchChanges()`. Many watches share one `Watch` stream, with ids the client
 * assigns (etcd ≥ 3.4), so creation needs no one-at-a-time handshake and answers are never matched by arrival
 * order. A broken stream is reopened with backoff and every watch is re-created from the revision after the last
 * event it saw, so no delete is lost to a reconnect (unless compacted, which is reported as a reset).
 *
 * `etcd3`'s own `WatchManager` is not used: it creates watchers strictly one after another, backs off up to 30 s
 * after a failure, and throws from its stream handler on an answer it cannot match.
 */
export class EtcdReleaseWatch {
  readonly #client: WatchClientLike;
  readonly #requests: EtcdRequests;
  readonly #registrations = new Set<Registration>();
  readonly #byId = new Map<string, Registration>();
  /**
   * Ids of the creates sent on the current stream that etcd has not answered yet, oldest first. etcd answers creates
   * in the order it reads them, so an answer with no id (a refusal) is for the oldest.
   */
  #unanswered: string[] = [];
  #stream: WatchStream | undefined;
  #opening = false;
  #nextId = 1;
  #backoffMs = 50;
  #reopenTimer: (() => void) | undefined;
  /** Pending renewal of the stream after a refusal; until then no create is sent on the old one. */
  #renewTimer: (() => void) | undefined;
  /** Delay before that renewal: doubles per renewal, back to 50 ms once a refused watch is created. */
  #renewBackoffMs = 50;
  #idleTimer: (() => void) | undefined;
  #closed = false;

  constructor(client: WatchClientLike, requests: EtcdRequests) {
    this.#client = client;
    this.#requests = requests;
  }

  /** Starts a watch; returns its cancel function (idempotent). */
  watch(spec: WatchSpec, listener: WatchListener): () => void {
    if (this.#closed) return () => {};
    const registration: Registration = {
      spec,
      listener,
      watchId: undefined,
      nextRevision: spec.startRevision,
      retry: undefined,
      refusedBackoffMs: 50,
      refused: false,
    };
    this.#registrations.add(registration);
    this.#idleTimer?.();
    this.#idleTimer = undefined;
    if (this.#stream) this.#create(this.#stream, registration);
    else this.#open();
    return () => this.#cancel(registration);
  }

  close(): void {
    this.#closed = true;
    this.#reopenTimer?.();
    this.#renewTimer?.();
    this.#idleTimer?.();
    for (const registration of this.#registrations) registration.retry?.();
    this.#registrations.clear();
    this.#byId.clear();
    this.#unanswered = [];
    const stream = this.#stream;
    this.#stream = undefined;
    if (stream) closeStream(stream);
  }

  #open(): void {
    if (this.#opening || this.#stream || this.#closed || this.#reopenTimer) return;
    this.#opening = true;
    // No gRPC deadline on the stream itself: it would end the stream, not the call to open it.
    this.#requests
      .run('watch stream', () => this.#client.watch(), { onLate: (late) => closeStream(late) })
      .then(
        (stream) => {
          this.#opening = false;
          if (this.#closed || this.#registrations.size === 0) {
            closeStream(stream);
            return;
          }
          this.#stream = stream;
          this.#unanswered = [];
          stream.on('data', (response) => this.#onResponse(stream, response));
          stream.on('error', () => this.#broken(stream));
          stream.on('end', () => this.#broken(stream));
          for (const registration of this.#registrations) this.#create(stream, registration);
        },
        () => {
          this.#opening = false;
          this.#scheduleReopen();
        },
      );
  }

  #create(stream: WatchStream, registration: Registration): void {
    // A renewal pending: the old stream's creates would be refused too; #open creates it on the new one.
    if (registration.retry || this.#renewTimer) return;
    const watchId = String(this.#nextId++);
    if (registration.watchId !== undefined) this.#byId.delete(registration.watchId);
    registration.watchId = watchId;
    this.#byId.set(watchId, registration);
    const { key, rangeEnd } = registration.spec;
    const from = registration.nextRevision;
    try {
      stream.write({
        create_request: {
          key,
          ...(rangeEnd ? { range_end: rangeEnd } : {}),
          // One revision early (its events are dropped in #onResponse): etcd cancels a watch as compacted only when
          // it starts below the compaction, yet a compaction at a revision drops a delete made there, so a watch
          // from exactly that revision would be created and never hear the delete.
          ...(from !== undefined ? { start_revision: (from > 1n ? from - 1n : from).toString() } : {}),
          ...(registration.spec.puts ? {} : { filters: ['Noput' as const] }),
          watch_id: watchId,
        },
      });
      this.#unanswered.push(watchId);
    } catch {
      this.#broken(stream);
    }
  }

  #cancel(registration: Registration): void {
    if (!this.#registrations.delete(registration)) return;
    registration.retry?.();
    registration.retry = undefined;
    const watchId = registration.watchId;
    if (watchId !== undefined) {
      this.#byId.delete(watchId);
      try {
        this.#stream?.write({ cancel_request: { watch_id: watchId } });
      } catch {
        // the stream is going away; nothing to cancel
      }
    }
    if (this.#registrations.size === 0 && !this.#idleTimer) {
      this.#idleTimer = later(this.#requests.clock, IDLE_CLOSE_MS, () => {
        this.#idleTimer = undefined;
        if (this.#registrations.size > 0 || !this.#stream) return;
        const stream = this.#stream;
        this.#stream = undefined;
        closeStream(stream);
      });
    }
  }

  // Listeners run through callSubscriber: a throw or rejection there is its owner's bug (`LockService.watch` is
  // public), and let through into the etcd client's stream handler it would end the process as an unhandled error
  // and cut off every other watch on the stream.
  #onResponse(stream: WatchStream, response: WatchResponseLike): void {
    if (stream !== this.#stream) return;
    const watchId = String(response.watch_id);
    const answered = watchId === NO_WATCH_ID ? this.#unanswered.shift() : watchId;
    if (response.created || response.canceled) this.#answered(answered);
    const registration = answered === undefined ? undefined : this.#byId.get(answered);
    if (!registration || answered === undefined) return;
    this.#backoffMs = 50;
    if (response.canceled) {
      this.#byId.delete(answered);
      registration.watchId = undefined;
      registration.nextRevision = undefined;
      // Either way the owner may have missed a delete, and re-reads.
      callSubscriber(() => registration.listener.onReset?.());
      if (!this.#registrations.has(registration)) return;
      if (response.compact_revision !== '0' && response.compact_revision !== '') {
        // Compacted past the start revision: start over from now, at once; re-created from now, a watch is never
        // compacted again.
        registration.refusedBackoffMs = 50;
        this.#create(stream, registration);
      } else if (!registration.refused) {
        // Refused (etcd 3.4.23 answers a create refused for permission with watch id -1 and the reason). etcd
        // checks a create against the token the stream was opened with, and drops a token unused for
        // --auth-token-ttl (5 min by default) while etcd3 re-authenticates only its unary calls: on an old stream
        // every new watch is refused, for good. A first refusal therefore renews the stream (with backoff).
        registration.refused = true;
        this.#renewLater();
      } else {
        // Refused on a stream opened since: the same create would be refused again, so it is retried with
        // backoff, each refusal telling the owner once more.
        this.#retryLater(registration);
      }
      return;
    }
    if (registration.refused) {
      registration.refused = false;
      this.#renewBackoffMs = 50;
    }
    registration.refusedBackoffMs = 50;
    if (response.created) callSubscriber(() => registration.listener.onCreated?.());
    // Events before the revision asked for come only from the one revision the watch was created early (#create).
    const from = registration.nextRevision;
    const events =
      from === undefined
        ? response.events
        : response.events.filter((event) => BigInt(event.kv.mod_revision) >= from);
    if (events.length === 0) return;
    let last = 0n;
    const deletes: WatchEventLike[] = [];
    for (const event of events) {
      const revision = BigInt(event.kv.mod_revision);
      if (revision > last) last = revision;
      if (event.type === 'Delete') deletes.push(event);
    }
    registration.nextRevision = last + 1n;
    if (deletes.length > 0) callSubscriber(() => registration.listener.onDeletes?.(deletes));
    callSubscriber(() => registration.listener.onEvents?.(events));
  }

  #broken(stream: WatchStream): void {
    if (stream !== this.#stream) return;
    this.#drop(stream);
    this.#scheduleReopen();
  }

  /** Closes the current stream; every watch on it is reset, to be re-created on the next. */
  #drop(stream: WatchStream): void {
    this.#stream = undefined;
    closeStream(stream);
    this.#byId.clear();
    this.#unanswered = [];
    for (const registration of [...this.#registrations]) {
      registration.watchId = undefined;
      callSubscriber(() => registration.listener.onReset?.());
    }
  }

  /**
   * Replaces the stream, after the backoff, with one opened now (with the client's current token). Every watch is
   * reset once and re-created from where it was; one refused on the new stream too then retries on it alone.
   */
  #renewLater(): void {
    if (this.#renewTimer) return;
    const delay = this.#renewBackoffMs * (0.5 + this.#requests.clock.random());
    this.#renewBackoffMs = Math.min(MAX_BACKOFF_MS, this.#renewBackoffMs * 2);
    this.#renewTimer = later(this.#requests.clock, delay, () => {
      this.#renewTimer = undefined;
      if (this.#stream) this.#drop(this.#stream);
      this.#open();
    });
  }

  /** Drops `watchId` from the creates awaiting an answer. */
  #answered(watchId: string | undefined): void {
    if (watchId === undefined) return;
    const at = this.#unanswered.indexOf(watchId);
    if (at >= 0) this.#unanswered.splice(at, 1);
  }

  #retryLater(registration: Registration): void {
    const delay = registration.refusedBackoffMs * (0.5 + this.#requests.clock.random());
    registration.refusedBackoffMs = Math.min(MAX_BACKOFF_MS, registration.refusedBackoffMs * 2);
    registration.retry = later(this.#requests.clock, delay, () => {
      registration.retry = undefined;
      if (!this.#registrations.has(registration)) return;
      if (this.#stream) this.#create(this.#stream, registration);
      else this.#open();
    });
  }

  #scheduleReopen(): void {
    if (this.#closed || this.#registrations.size === 0 || this.#reopenTimer) return;
    const delay = this.#backoffMs * (0.5 + this.#requests.clock.random());
    this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
    this.#reopenTimer = later(this.#requests.clock, delay, () => {
      this.#reopenTimer = undefined;
      this.#open();
    });
  }
}
