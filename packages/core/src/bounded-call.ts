import type { Clock } from './clock.js';
import { isDLockError, TransportError, textOf } from './errors.js';

const SUPERSEDED = Symbol('superseded');

/** A deadline entry: linked into its `CallDeadlines` list while pending. */
abstract class Entry {
  /** Monotonic time the entry comes due. */
  at: number;
  prev: Entry | undefined = undefined;
  next: Entry | undefined = undefined;
  /** The list the entry is in, while it is in one. */
  owner: CallDeadlines | undefined = undefined;

  constructor(at: number) {
    this.at = at;
  }

  /** Settles the entry: at its deadline with no reason (a timeout), or with `reason` when the owner stops. */
  abstract expire(reason?: unknown): void;
}

class CallbackEntry extends Entry {
  readonly #callback: (reason?: unknown) => void;

  constructor(at: number, callback: (reason?: unknown) => void) {
    super(at);
    this.#callback = callback;
  }

  expire(reason?: unknown): void {
    this.#callback(reason);
  }
}

/** What {@link CallDeadlines.add} returns: pass it to `delete` once the call settled. */
export interface Deadline {
  /** When it comes due, on the clock's monotonic time (ms). */
  readonly at: number;
}

/**
 * One timer for the deadlines of every service call a client has in flight. A timer per call would cost a
 * `setTimeout` and a `clearTimeout` per call, and Node's timer lists can hit a slow path when durations come and go
 * (measured here at ~110 µs per `setTimeout`). Deadlines are added and removed in O(1) (a linked list: no hash
 * table that grows and shrinks with every call); the timer is re-armed only when a deadline earlier than the armed
 * one arrives or when it fires.
 *
 * The timer is unref'd: it bounds calls, it does not keep the process alive (a real service's socket does that
 * while a call is in flight).
 */
export class CallDeadlines {
  readonly #clock: Clock;
  #head: Entry | undefined;
  #armedAt = Number.POSITIVE_INFINITY;
  #timer: AbortController | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Calls `expire` with no argument at `at`, or with the reason `stop` is given, unless deleted before. */
  add(at: number, expire: (reason?: unknown) => void): Deadline {
    const entry = new CallbackEntry(at, expire);
    this.insert(entry);
    return entry;
  }

  /** Cancels a deadline `add` returned; nothing if it already fired or was deleted. */
  delete(entry: Deadline): void {
    if (entry instanceof Entry) this.remove(entry);
  }

  /** @internal Links an entry (not already in a list). */
  insert(entry: Entry): void {
    entry.owner = this;
    entry.prev = undefined;
    entry.next = this.#head;
    if (this.#head) this.#head.prev = entry;
    this.#head = entry;
    if (entry.at < this.#armedAt) this.#arm(entry.at);
  }

  /** @internal Unlinks an entry; nothing if it is not in this list (any more). */
  remove(entry: Entry): void {
    if (entry.owner !== this) return;
    entry.owner = undefined;
    if (entry.prev) entry.prev.next = entry.next;
    else this.#head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
  }

  /**
   * Cancels the timer and settles every call still in flight with `reason` (e.g. the owner was closed), so that no
   * caller is left with a promise that never settles once nothing bounds it any more.
   */
  stop(reason?: unknown): void {
    const pending = this.#drain(() => true);
    for (const entry of pending) entry.expire(reason);
    this.#timer?.abort(SUPERSEDED);
    this.#timer = undefined;
    this.#armedAt = Number.POSITIVE_INFINITY;
  }

  /** Unlinks and returns the entries `due` picks, oldest first. */
  #drain(due: (entry: Entry) => boolean): Entry[] {
    const picked: Entry[] = [];
    for (let entry = this.#head; entry !== undefined; ) {
      const next = entry.next;
      if (due(entry)) {
        this.remove(entry);
        picked.push(entry);
      }
      entry = next;
    }
    return picked.reverse();
  }

  #arm(at: number): void {
    this.#timer?.abort(SUPERSEDED);
    const timer = new AbortController();
    this.#timer = timer;
    this.#armedAt = at;
    this.#clock.sleep(Math.max(0, at - this.#clock.monotonic()), timer.signal, { unref: true }).then(
      () => {
        if (this.#timer !== timer) return;
        this.#timer = undefined;
        this.#armedAt = Number.POSITIVE_INFINITY;
        this.#fire();
      },
      () => {},
    );
  }

  #fire(): void {
    const now = this.#clock.monotonic();
    const due = this.#drain((entry) => entry.at <= now);
    let next = Number.POSITIVE_INFINITY;
    for (let entry = this.#head; entry !== undefined; entry = entry.next) {
      if (entry.at < next) next = entry.at;
    }
    for (const entry of due) entry.expire();
    if (next < this.#armedAt) this.#arm(next);
  }
}

/** How {@link boundedCall} bounds one call: `deadlines`, `clock`, `timeoutMs` and `what` are required. */
export interface BoundedCallOptions<T, R = T> {
  /** The shared timer the call's deadline goes on. */
  readonly deadlines: CallDeadlines;
  /** The clock `timeoutMs` is measured on (its monotonic time). */
  readonly clock: Clock;
  /** The clock's monotonic time when the call starts, if the caller has just read it (saves a reading). */
  readonly now?: number | undefined;
  /** The call fails with a `TransportError` when it has not settled after this many ms. */
  readonly timeoutMs: number;
  /**
   * Aborting it settles the call at once with the signal's reason. A function is called for the signal only once
   * the call has been in flight for `signalAfterMs`: a call that answers sooner never makes the caller build one.
   */
  readonly signal?: AbortSignal | (() => AbortSignal) | undefined;
  /**
   * With a `signal` function: how long (ms) the call runs before the signal is read and listened to. An abort is then
   * seen at most this much late. Default 0 (read at once).
   */
  readonly signalAfterMs?: number | undefined;
  /**
   * The call puts its cancel function here while in flight; calling it settles the call at once with the reason.
   * Cheaper than a listener on a shared signal when every call would add and remove one (the client's close).
   */
  readonly cancels?: Set<(reason: unknown) => void>;
  /** Receives the value if the call succeeds after it was abandoned, e.g. to release a grant nobody will use. */
  readonly onLate?: (value: T) => void;
  /**
   * Turns the call's value into the bound call's, in the reaction that settles it: no promise layer of its own. What
   * it throws rejects the bound call (a dlock error as it is, anything else as a `TransportError`).
   */
  readonly map?: (value: T) => R | PromiseLike<R>;
  /**
   * Called once, at the moment the call is given up (timeout, cancel, abort, stop), before its promise rejects: for
   * a call that must then send nothing more.
   */
  readonly onAbandon?: (() => void) | undefined;
  /**
   * Called once with the error the bound call is about to reject with, when the call itself failed or was given up
   * (not when `map` threw): for clean-up that must run before the caller hears, without a promise layer of its own.
   */
  readonly onError?: ((error: unknown) => void) | undefined;
  /** Describes the call in the timeout message. */
  readonly what: string;
}

/**
 * One call in flight: its own deadline entry, so that a call costs one object, one promise and the reactions on the
 * service's promise (this runs twice per acquire and release cycle, where every allocation shows).
 */
class BoundedCall<T, R> extends Entry {
  readonly #options: BoundedCallOptions<T, R>;
  #settled = false;
  #resolve!: (value: R | PromiseLike<R>) => void;
  #reject!: (reason: unknown) => void;
  /** The signal that tells the call it was abandoned, made only if the call asks for it (see `boundedCall`). */
  #inner: AbortController | undefined;
  #abandoned = false;
  #abandonReason: unknown;
  #cancel: ((reason: unknown) => void) | undefined;
  /** The caller's signal while listened to, and the listener. */
  #listened: AbortSignal | undefined;
  #onAbort: (() => void) | undefined;
  /** A signal to read once the call is slow: the entry is due then first, and at the call's deadline after. */
  #readSignal: (() => AbortSignal) | undefined;
  #deadlineAt = 0;

  constructor(options: BoundedCallOptions<T, R>) {
    super((options.now ?? options.clock.monotonic()) + options.timeoutMs);
    this.#options = options;
  }

  start(
    call: (abandoned: () => AbortSignal) => Promise<T>,
    signal: AbortSignal | (() => AbortSignal) | undefined,
  ): Promise<R> {
    const options = this.#options;
    const promise = new Promise<R>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    const { cancels } = options;
    if (cancels) {
      const cancel = (reason: unknown): void => this.#cancelWith(reason);
      this.#cancel = cancel;
      cancels.add(cancel);
    }
    if (typeof signal === 'function') {
      // Read only if the call is still running then; a call whose deadline comes first never reads it.
      const afterMs = options.signalAfterMs ?? 0;
      if (afterMs < options.timeoutMs) {
        this.#readSignal = signal;
        this.#deadlineAt = this.at;
        this.at = this.at - options.timeoutMs + afterMs;
      }
    } else if (signal) {
      this.#listen(signal);
    }
    options.deadlines.insert(this);
    let pending: Promise<T>;
    try {
      pending = call(() => this.#signal());
      // A service that answers with a plain value or a thenable of its own (a JavaScript adapter, a mock): taken as
      // `await` would take it. Calling its `then` here could throw after the deadline went in, which would leave
      // that deadline to reject a promise nobody holds. Only a native promise skips the extra layer.
      if (!(pending instanceof Promise)) pending = Promise.resolve(pending);
    } catch (error) {
      pending = Promise.reject(error);
    }
    try {
      pending.then(
        (value) => this.#succeeded(value),
        (error: unknown) => this.#failed(error),
      );
    } catch (error) {
      // A native promise whose `then` was patched to throw (or an object that passes as a promise): a failed call,
      // settled here, not a throw out of the caller with this call's deadline left to reject unheard.
      this.#failed(error);
    }
    return promise;
  }

  expire(reason?: unknown): void {
    const read = this.#readSignal;
    if (reason === undefined && read !== undefined) {
      // The call is slow: from now on the caller's signal ends it, and its own deadline is next.
      this.#readSignal = undefined;
      const signal = read();
      if (signal.aborted) {
        this.#cancelWith(signal.reason);
        return;
      }
      this.#listen(signal);
      this.at = this.#deadlineAt;
      this.#options.deadlines.insert(this);
      return;
    }
    const error =
      reason ??
      new TransportError(
        `${this.#options.what} did not answer within ${Math.round(this.#options.timeoutMs)} ms`,
      );
    this.#cancelWith(error);
  }

  #listen(signal: AbortSignal): void {
    const onAbort = (): void => this.#cancelWith(signal.reason);
    this.#listened = signal;
    this.#onAbort = onAbort;
    signal.addEventListener('abort', onAbort, { once: true });
  }

  #signal(): AbortSignal {
    if (!this.#inner) {
      this.#inner = new AbortController();
      if (this.#abandoned) this.#inner.abort(this.#abandonReason);
    }
    return this.#inner.signal;
  }

  #cancelWith(reason: unknown): void {
    if (this.#settled) return;
    this.#abandoned = true;
    this.#abandonReason = reason;
    this.#inner?.abort(reason);
    this.#options.onAbandon?.();
    this.#finish();
    this.#options.onError?.(reason);
    this.#reject(reason);
  }

  #succeeded(value: T): void {
    if (!this.#finish()) {
      this.#options.onLate?.(value);
      return;
    }
    const { map } = this.#options;
    if (map === undefined) {
      this.#resolve(value as unknown as R);
      return;
    }
    try {
      this.#resolve(map(value));
    } catch (error) {
      this.#reject(this.#asDLockError(error));
    }
  }

  #failed(error: unknown): void {
    if (!this.#finish()) return;
    const failure = this.#asDLockError(error);
    this.#options.onError?.(failure);
    this.#reject(failure);
  }

  #asDLockError(error: unknown): unknown {
    return isDLockError(error)
      ? error
      : new TransportError(`${this.#options.what} failed: ${textOf(error)}`, { cause: error });
  }

  /** Marks the call settled; false if it already was. */
  #finish(): boolean {
    if (this.#settled) return false;
    this.#settled = true;
    const options = this.#options;
    if (this.#onAbort) this.#listened?.removeEventListener('abort', this.#onAbort);
    if (this.#cancel) options.cancels?.delete(this.#cancel);
    options.deadlines.remove(this);
    return true;
  }
}

/**
 * Runs one service call with a hard bound. Backend clients do not always bound their own calls (node-redis waits
 * forever for the reply to a command already written), so no public call may rely on them. Anything the service
 * throws that is not a dlock error becomes a `TransportError`.
 *
 * The signal that tells the call it was abandoned is made only if the call asks for it: an AbortController costs a
 * few µs, a real share of a fast acquire, and most calls finish without ever reading it.
 */
export function boundedCall<T>(
  call: (abandoned: () => AbortSignal) => Promise<T>,
  options: BoundedCallOptions<T>,
): Promise<T>;
export function boundedCall<T, R>(
  call: (abandoned: () => AbortSignal) => Promise<T>,
  options: BoundedCallOptions<T, R> & { readonly map: (value: T) => R | PromiseLike<R> },
): Promise<R>;
export function boundedCall<T, R>(
  call: (abandoned: () => AbortSignal) => Promise<T>,
  options: BoundedCallOptions<T, R>,
): Promise<R> {
  let { signal } = options;
  if (typeof signal === 'function' && !((options.signalAfterMs ?? 0) > 0)) signal = signal();
  if (typeof signal === 'object' && signal.aborted) {
    options.onError?.(signal.reason);
    return Promise.reject(signal.reason);
  }
  return new BoundedCall(options).start(call, signal);
}
