import { randomBytes } from 'node:crypto';
import type { Clock } from '@dlock/core';
import { callSubscriber, WakeSignal } from '@dlock/core/adapter';
import type { Database, Listening } from './database.js';

/** Without a notice for this long, nobody waits: the listening connection goes back (or is ended). */
const IDLE_CLOSE_MS = 2_000;
/** An observer row lives this long unless refreshed; the service refreshes its rows every third of it. */
const OBSERVE_MS = 60_000;
/**
 * While listening, the service checks this often (and once right after each LISTEN) that a notice sent through the
 * pool arrives on the listening connection: a socket to a paused or cut-off server stays open without an error, and
 * a LISTEN that went through a transaction-pooling proxy landed on a server connection nobody reads; either way
 * notices would stop without a word.
 */
const PING_MS = 10_000;
const MIN_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 2_000;

/**
 * Wake-ups for this service's queued waiters. One channel per service (`dlock_wake_<random>`), LISTENed on one
 * dedicated connection while anyone waits: a release or leave statement picks the next waiter and sends
 * `pg_notify(<its service's channel>, <its claim id>)` in the same statement (delivered when it commits), and only
 * that claim is woken. A lost connection is re-opened with backoff; every waiter is woken then, and again once
 * listening resumes (a notice may have been missed in between). Notices only save time: a waiter also looks again
 * at its holder's expiry and at its own refresh, and on a backoff while nobody listens.
 *
 * Also carries notices per lock name (`watch`, `watchChanges`): this service's own grants, releases and metadata
 * updates at once, in-process; and, while it observes the name, everyone's: the service writes an observer row for
 * the name (kind `o` in the waiters table, refreshed every 20 s, deleted when the last subscriber leaves), and the
 * statements that grant, release or update the name send `c:<name>` to every observer's channel.
 */
export interface Observing {
  /**
   * Writes or refreshes this service's observer rows of `names` for `ms`; `onSettled` once the statement has finished
   * on the server (it may commit after its call was given up).
   */
  observe(names: readonly string[], ms: number, onSettled: () => void): Promise<unknown>;
  /**
   * Deletes this service's observer row of `name`, bounded by `timeoutMs` (default: a statement's bound);
   * `onSettled` as for `observe`.
   */
  unobserve(name: string, timeoutMs?: number, onSettled?: () => void): Promise<unknown>;
  /** Wakes the first live waiter of (kind, name): a wake-up reached a claim that no longer waits. */
  passOn(kind: string, name: string): Promise<unknown>;
  /** Sends `payload` to this service's channel through the pool (the listening connection's check). */
  selfNotify(payload: string): Promise<unknown>;
}

interface Waiting {
  readonly wake: WakeSignal;
  /** Wake-ups that reached this claim so far. */
  notices: number;
}

export class PostgresReleaseWatch {
  /** This service's channel; a waiter row names it so a release can reach this service. */
  readonly channel = `dlock_wake_${randomBytes(8).toString('hex')}`;
  readonly #db: Database;
  readonly #clock: Clock;
  readonly #claims = new Map<string, Waiting>();
  /** Checks of the listening connection awaiting their notice, by payload. */
  readonly #probes = new Map<string, () => void>();
  /** False after a check failed: the next connection counts as listening only once its own check passes. */
  #trusted = true;
  readonly #names = new Map<string, Set<() => void>>();
  #listening: Listening | undefined;
  /** A connection that has LISTENed but whose check has not passed yet (after a failed one). */
  #unconfirmed: Listening | undefined;
  #opening = false;
  #backoffMs = MIN_BACKOFF_MS;
  #idleTimer: AbortController | undefined;
  #retryTimer: AbortController | undefined;
  #closed = false;

  readonly #observing: Observing;
  #refreshTimer: AbortController | undefined;
  #pingTimer: AbortController | undefined;
  /**
   * Names whose observer row may be in the table, with the number of the last observe statement sent for each: a
   * delete that succeeded after that statement had finished takes the name out.
   */
  readonly #rows = new Map<string, number>();
  #observeSeq = 0;
  /** Observe statements not yet finished on the server: until then, a delete may run before their insert. */
  readonly #inFlight = new Set<Promise<void>>();
  /**
   * Deletes of a name's observer row not yet finished on the server, by name: a new subscription's insert waits for
   * them, or the delete could land after it (on another connection) and take the new subscription's row.
   */
  readonly #deleting = new Map<string, Promise<void>>();

  constructor(db: Database, clock: Clock, observing: Observing) {
    this.#db = db;
    this.#clock = clock;
    this.#observing = observing;
  }

  /** True while a notice to this service can arrive: the connection has confirmed its LISTEN and not failed. */
  get listening(): boolean {
    return this.#listening !== undefined;
  }

  /** The wake-up of a claim that is about to queue (registered before its first statement can queue it). */
  register(claimId: string): WakeSignal {
    const wake = new WakeSignal();
    this.#claims.set(claimId, { wake, notices: 0 });
    this.#idleTimer = cancel(this.#idleTimer);
    if (!this.#listening) this.#open();
    return wake;
  }

  /** Wake-ups that reached a registered claim so far (0 once it is unregistered). */
  notices(claimId: string): number {
    return this.#claims.get(claimId)?.notices ?? 0;
  }

  /** Hands a wake-up this service cannot use to the first live waiter of (kind, name). */
  passOn(kind: string, name: string): void {
    if (this.#closed) return;
    this.#observing.passOn(kind, name).catch(() => {});
  }

  unregister(claimId: string): void {
    if (this.#claims.delete(claimId)) this.#maybeIdle();
  }

  /** Subscribes to this service's own notices about `name` (see `notify`). */
  onName(name: string, listener: () => void): () => void {
    if (this.#closed) return () => {};
    let set = this.#names.get(name);
    if (!set) {
      set = new Set();
      this.#names.set(name, set);
      this.#startObserving(name);
    }
    // `watch` is public: a callback's throw or rejection (an `async` one type-checks) has nobody to go to, would end
    // the process, and must not keep the other subscribers from hearing.
    const own = (): void => callSubscriber(listener);
    set.add(own);
    return () => {
      const current = this.#names.get(name);
      if (!current?.delete(own) || current.size > 0) return;
      this.#names.delete(name);
      if (!this.#closed) this.#unobserve(name);
      if (this.#names.size === 0) this.#refreshTimer = cancel(this.#refreshTimer);
      this.#maybeIdle();
    };
  }

  /** Tells this service's subscribers of `name` that its holder or metadata may have changed. */
  notify(name: string): void {
    const set = this.#names.get(name);
    if (!set) return;
    for (const listener of [...set]) listener();
  }

  /**
   * Stops listening and deletes this service's observer rows, settling by `deadline` (the clock's monotonic time):
   * first it lets the observe statements still running finish (a delete run before its insert commits would find
   * nothing, and the row would stay for OBSERVE_MS), then deletes every name's row that may be there. A database
   * that cannot be reached by then keeps those rows until they expire (OBSERVE_MS at most).
   */
  async close(deadline: number): Promise<void> {
    this.#closed = true;
    this.#idleTimer = cancel(this.#idleTimer);
    this.#retryTimer = cancel(this.#retryTimer);
    this.#refreshTimer = cancel(this.#refreshTimer);
    this.#pingTimer = cancel(this.#pingTimer);
    this.#names.clear();
    this.#wakeAll();
    this.#claims.clear();
    const listening = this.#listening;
    const unconfirmed = this.#unconfirmed;
    this.#listening = undefined;
    this.#unconfirmed = undefined;
    await Promise.all([listening?.close(), unconfirmed?.close()]);
    if (!this.#db.canListen) return;
    await this.#within(deadline, Promise.allSettled([...this.#inFlight]));
    const left = deadline - this.#clock.monotonic();
    if (left <= 0 || this.#rows.size === 0) return;
    await Promise.allSettled(
      [...this.#rows].map(([name, seq]) =>
        this.#observing.unobserve(name, Math.ceil(left)).then(() => {
          if (this.#rows.get(name) === seq) this.#rows.delete(name);
        }),
      ),
    );
  }

  /**
   * Writes or refreshes the observer rows of `names`, keeping track of the statement until the server is done; sent
   * once `after` (a delete of the row still running) has finished, and not at all if the service closed meanwhile
   * (close() deletes the rows itself).
   */
  #observe(names: readonly string[], after?: Promise<void>): Promise<unknown> {
    const seq = ++this.#observeSeq;
    for (const name of names) this.#rows.set(name, seq);
    let settled!: () => void;
    const done = new Promise<void>((resolve) => {
      settled = resolve;
    });
    this.#inFlight.add(done);
    void done.then(() => this.#inFlight.delete(done));
    if (after === undefined) return this.#observing.observe(names, OBSERVE_MS, settled);
    return after.then(() => {
      if (this.#closed) {
        settled();
        return undefined;
      }
      return this.#observing.observe(names, OBSERVE_MS, settled);
    });
  }

  /** The last subscriber of `name` left: its row goes once every observe statement sent before has finished. */
  #unobserve(name: string): void {
    if (!this.#db.canListen || !this.#rows.has(name)) return;
    void Promise.allSettled([...this.#inFlight]).then(() => {
      // Subscribed again meanwhile, or closing (close() deletes every row itself, within its bound).
      if (this.#closed || this.#names.has(name)) return;
      const seq = this.#rows.get(name);
      if (seq === undefined) return;
      let settled!: () => void;
      const deleting = new Promise<void>((resolve) => {
        settled = resolve;
      });
      this.#deleting.set(name, deleting);
      void deleting.then(() => {
        if (this.#deleting.get(name) === deleting) this.#deleting.delete(name);
      });
      this.#observing.unobserve(name, undefined, settled).then(
        () => {
          if (this.#rows.get(name) === seq) this.#rows.delete(name);
        },
        () => {},
      );
    });
  }

  /** `promise`, or nothing once `deadline` has passed. The wait is not unref'd: it is part of a call in flight. */
  async #within(deadline: number, promise: Promise<unknown>): Promise<void> {
    const left = deadline - this.#clock.monotonic();
    if (left <= 0) return;
    const timer = new AbortController();
    await Promise.race([promise, this.#clock.sleep(left, timer.signal).catch(() => {})]);
    timer.abort();
  }

  #open(): void {
    if (
      this.#opening ||
      this.#listening ||
      this.#unconfirmed ||
      this.#closed ||
      !this.#db.canListen ||
      this.#retryTimer
    ) {
      return;
    }
    this.#opening = true;
    this.#db
      .listen(this.channel, {
        onNotice: (payload) => this.#onNotice(payload),
        onLost: () => this.#lost(),
      })
      .then(
        (listening) => {
          this.#opening = false;
          if (this.#closed || !this.#needed()) {
            void listening.close();
            return;
          }
          if (this.#trusted) this.#confirmed(listening);
          else this.#unconfirmed = listening;
          this.#check(listening);
        },
        () => {
          this.#opening = false;
          this.#retry();
        },
      );
  }

  /** `<claim id>:<kind>:<name>` or a bare claim id (a wake-up), `c:<name>` (an observed change), `p:<nonce>`. */
  #onNotice(payload: string): void {
    const colon = payload.indexOf(':');
    if (colon === 1) {
      const rest = payload.slice(2);
      if (payload.startsWith('c:')) this.notify(rest);
      else if (payload.startsWith('p:')) this.#probes.get(rest)?.();
      return;
    }
    const id = colon < 0 ? payload : payload.slice(0, colon);
    const waiting = this.#claims.get(id);
    if (waiting) {
      waiting.notices++;
      waiting.wake.notify();
      return;
    }
    // Not waiting any more (granted by a statement that did not see this release, or gone): the next waiter may
    // be the one a slot is free for. A bare id was passed on already and goes no further.
    if (colon < 0) return;
    const kind = payload.slice(colon + 1, colon + 2);
    if (payload[colon + 2] === ':') this.passOn(kind, payload.slice(colon + 3));
  }

  /** The connection's LISTEN counts once a notice sent through the pool has come back on it. */
  #confirmed(listening: Listening): void {
    this.#listening = listening;
    this.#backoffMs = MIN_BACKOFF_MS;
    // A release may have come before the LISTEN did: every waiter and observer looks again once.
    this.#wakeAll();
    for (const name of [...this.#names.keys()]) this.notify(name);
  }

  /**
   * A notice to this service's own channel, sent through the pool, must arrive on the listening connection within
   * twice a statement's bound; then the next check is due in PING_MS. A connection that did not hear it, or that no longer
   * answers, is dropped, and waiters fall back to their backoff until a new one passes.
   */
  #check(listening: Listening): void {
    this.#verdict(listening).then((verdict) => {
      // A connection lost or closed meanwhile says nothing about the next one.
      if (this.#listening !== listening && this.#unconfirmed !== listening) return;
      if (verdict === 'heard') this.#trusted = true;
      if (verdict === 'deaf') this.#trusted = false;
      if (this.#unconfirmed === listening) {
        this.#unconfirmed = undefined;
        if (verdict !== 'heard' || this.#closed || !this.#needed()) {
          void listening.close();
          if (verdict !== 'heard') this.#retry();
          return;
        }
        this.#confirmed(listening);
      }
      if (this.#listening !== listening) return;
      if (verdict === 'heard' || verdict === 'answers') {
        this.#schedulePing(listening);
        return;
      }
      void listening.close();
      this.#lost();
    });
  }

  /**
   * `heard`: the notice came back. `deaf`: it was sent and never arrived (a LISTEN through a transaction-pooling
   * proxy, a cut-off socket). When it could not even be sent (a busy pool, a server away), that says nothing about
   * the LISTEN, and the listening connection answers for itself: `answers` or `gone`. Sending the check's statement
   * is what a busy pool delays; counting that as deaf would drop the connection and wake every waiter at the worst
   * moment.
   */
  async #verdict(listening: Listening): Promise<'heard' | 'deaf' | 'answers' | 'gone'> {
    const nonce = randomBytes(6).toString('hex');
    const arrived = new Promise<void>((resolve) => this.#probes.set(nonce, resolve));
    try {
      try {
        await this.#observing.selfNotify(`p:${nonce}`);
      } catch {
        return await listening.ping().then(
          () => 'answers' as const,
          () => 'gone' as const,
        );
      }
      const timer = new AbortController();
      // A loaded server or client can be slow to hand a notice over: only a long silence counts as deafness.
      const late = this.#clock.sleep(2 * this.#db.timeoutMs, timer.signal, { unref: true }).then(
        () => 'deaf' as const,
        () => 'deaf' as const,
      );
      const verdict = await Promise.race([arrived.then(() => 'heard' as const), late]);
      timer.abort();
      return verdict;
    } finally {
      this.#probes.delete(nonce);
    }
  }

  #schedulePing(listening: Listening): void {
    this.#pingTimer = cancel(this.#pingTimer);
    this.#pingTimer = this.#later(PING_MS, () => {
      this.#pingTimer = undefined;
      if (this.#listening === listening) this.#check(listening);
    });
  }

  #lost(): void {
    this.#pingTimer = cancel(this.#pingTimer);
    this.#listening = undefined;
    this.#unconfirmed = undefined;
    // Waiters fall back to their backoff until notices flow again; each looks once now.
    this.#wakeAll();
    this.#retry();
  }

  #retry(): void {
    if (this.#closed || !this.#needed()) return;
    const delay = this.#backoffMs * (0.5 + this.#clock.random());
    this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
    this.#retryTimer = this.#later(delay, () => {
      this.#retryTimer = undefined;
      this.#open();
    });
  }

  /** Someone waits or observes: the connection is worth keeping. */
  #needed(): boolean {
    return this.#claims.size > 0 || this.#names.size > 0;
  }

  #maybeIdle(): void {
    if (this.#needed() || this.#closed || !(this.#listening || this.#unconfirmed || this.#opening)) return;
    this.#idleTimer = cancel(this.#idleTimer);
    this.#idleTimer = this.#later(IDLE_CLOSE_MS, () => this.#idle());
  }

  /** The name's first subscriber: an observer row, so other processes' changes reach this service too. */
  #startObserving(name: string): void {
    if (!this.#db.canListen) return;
    this.#idleTimer = cancel(this.#idleTimer);
    if (!this.#listening) this.#open();
    // Once the row is in place, the subscribers look once: a change before it would have been missed.
    this.#observe([name], this.#deleting.get(name)).then(
      () => this.notify(name),
      () => {},
    );
    if (!this.#refreshTimer) this.#scheduleRefresh();
  }

  #scheduleRefresh(): void {
    this.#refreshTimer = this.#later(OBSERVE_MS / 3, () => {
      this.#refreshTimer = undefined;
      const names = [...this.#names.keys()];
      if (this.#closed || names.length === 0) return;
      this.#observe(names).catch(() => {});
      this.#scheduleRefresh();
    });
  }

  #idle(): void {
    this.#idleTimer = undefined;
    if (this.#needed()) return;
    this.#pingTimer = cancel(this.#pingTimer);
    const listening = this.#listening;
    const unconfirmed = this.#unconfirmed;
    this.#listening = undefined;
    this.#unconfirmed = undefined;
    void listening?.close();
    void unconfirmed?.close();
  }

  #wakeAll(): void {
    for (const { wake } of this.#claims.values()) wake.notify();
  }

  /** Housekeeping timers are unref'd: they never keep the process alive. */
  #later(ms: number, fn: () => void): AbortController {
    const timer = new AbortController();
    this.#clock.sleep(ms, timer.signal, { unref: true }).then(fn, () => {});
    return timer;
  }
}

function cancel(timer: AbortController | undefined): undefined {
  timer?.abort();
  return undefined;
}
