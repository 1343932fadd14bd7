import {
  type AcquireRequest,
  type AcquireResult,
  type Clock,
  InvalidArgumentError,
  type Lease,
  type LockInfo,
  type LockService,
  MAX_TIMER_MS,
  type PermitRequest,
  type PermitsInfo,
  type RenewRequest,
  type RenewResult,
  systemClock,
  TransportError,
} from '@dlock/core';
import { rejectUnknownKeys, textOf } from '@dlock/core/adapter';

/** How a partition cuts calls off; see {@link FaultyLockService.partition}. */
export type PartitionMode =
  /** Calls fail at once with a `TransportError` (connection refused). */
  | 'fail'
  /** Calls never answer (packets dropped, sockets open) until `heal()`; the caller's own timeout must fire. */
  | 'hang';

/** How watch subscriptions fail; see {@link FaultyLockService.failWatches}. */
export type WatchFault =
  /** Subscribing throws a `TransportError`, as a service that cannot set a watch up (connection refused). */
  | 'throw'
  /** Subscribing succeeds, but no notice is delivered (a watch lost with its connection, a dropped event). */
  | 'silent';

/** The service calls {@link CallCounts} counts, one counter each. */
export type ServiceMethod = 'acquire' | 'renew' | 'release' | 'watch' | 'inspect' | 'updateMetadata';

/** Counts of calls that reached the wrapper, and of those forwarded to the real service. */
export interface CallCounts {
  /**
   * Calls made to the wrapper, faulted or not. A `renewMany` batch counts once per request in it; a `watchChanges`
   * subscription counts as `watch`.
   */
  readonly attempted: Record<ServiceMethod, number>;
  /** Calls that got past the faults and reached the wrapped service. */
  readonly forwarded: Record<ServiceMethod, number>;
}

/**
 * Wraps any {@link LockService} — the in-memory one or a real adapter — with switchable faults:
 * partitions (failing or hanging), added latency, dropped renewals, "fail the next N calls" and failing watches.
 * Renewal batches (`renewMany`) are faulted as one call, as a pipeline would be.
 *
 * A fault it cannot inject (a misspelt mode, a negative or non-finite number) throws `InvalidArgumentError` and leaves
 * the faults as they were: accepted, it injected no fault at all, and the test meant to face the fault passed without it.
 */
export class FaultyLockService implements LockService {
  readonly #inner: LockService;
  readonly #clock: Clock;
  #partition: PartitionMode | undefined;
  #latencyMs = 0;
  #dropRenewals = false;
  #failNext = 0;
  #watchFault: WatchFault | undefined;
  readonly #hung = new Set<(error: Error) => void>();
  readonly #counts: CallCounts = {
    attempted: { acquire: 0, renew: 0, release: 0, watch: 0, inspect: 0, updateMetadata: 0 },
    forwarded: { acquire: 0, renew: 0, release: 0, watch: 0, inspect: 0, updateMetadata: 0 },
  };
  readonly inspect?: (name: string) => Promise<LockInfo>;
  readonly updateMetadata?: (lease: Lease, metadata: string) => Promise<boolean>;
  readonly watchChanges?: (name: string, onChange: () => void) => () => void;
  readonly renewMany?: (requests: readonly RenewRequest[]) => Promise<readonly RenewResult[]>;
  readonly watchLeases?: (onLost: (ownershipTokens: readonly string[]) => void) => () => void;
  /** Counted as `acquire`: a permit's acquire crosses the same faults. */
  readonly acquirePermit?: (request: PermitRequest) => Promise<AcquireResult>;
  /** Counted as `inspect`: a read of the service. */
  readonly availablePermits?: (name: string, permits: number) => Promise<number>;
  /** Counted as `inspect`. */
  readonly inspectPermits?: (name: string, permits: number) => Promise<PermitsInfo>;

  constructor(inner: LockService, options: { clock?: Clock } = {}) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    rejectUnknownKeys(options, 'options', ['clock']);
    if (!isLockService(inner)) {
      throw new InvalidArgumentError('inner', 'must be a LockService (acquire, renew, release and watch)');
    }
    this.#inner = inner;
    this.#clock = options.clock ?? systemClock;
    const innerMany = inner.renewMany?.bind(inner);
    if (innerMany) {
      this.renewMany = (requests) => this.#call('renew', () => innerMany(requests), requests.length);
    }
    // Loss notices come from the adapter's own bookkeeping (a session timer), not over the wire: pass them through.
    const innerWatchLeases = inner.watchLeases?.bind(inner);
    if (innerWatchLeases) this.watchLeases = innerWatchLeases;
    // The election methods, when the inner service has them, cross the same faults as every other call.
    const innerInspect = inner.inspect?.bind(inner);
    if (innerInspect) this.inspect = (name) => this.#call('inspect', () => innerInspect(name));
    const innerUpdate = inner.updateMetadata?.bind(inner);
    if (innerUpdate) {
      this.updateMetadata = (lease, metadata) =>
        this.#call('updateMetadata', () => innerUpdate(lease, metadata));
    }
    const innerPermit = inner.acquirePermit?.bind(inner);
    if (innerPermit) this.acquirePermit = (request) => this.#call('acquire', () => innerPermit(request));
    const innerAvailable = inner.availablePermits?.bind(inner);
    if (innerAvailable) {
      this.availablePermits = (name, permits) => this.#call('inspect', () => innerAvailable(name, permits));
    }
    const innerInspectPermits = inner.inspectPermits?.bind(inner);
    if (innerInspectPermits) {
      this.inspectPermits = (name, permits) =>
        this.#call('inspect', () => innerInspectPermits(name, permits));
    }
    const innerChanges = inner.watchChanges?.bind(inner);
    if (innerChanges) {
      this.watchChanges = (name, onChange) =>
        this.#subscribe('watchChanges', onChange, (notify) => innerChanges(name, notify));
    }
  }

  /** Cuts the service off: every call fails (`'fail'`) or hangs (`'hang'`) until {@link heal}. */
  partition(mode: PartitionMode = 'fail'): void {
    if (mode !== 'fail' && mode !== 'hang') {
      throw new InvalidArgumentError('mode', `must be 'fail' or 'hang', got ${shown(mode)}`);
    }
    this.#partition = mode;
  }

  /** Ends a partition; calls left hanging fail now, as a reset connection would. */
  heal(): void {
    this.#partition = undefined;
    for (const fail of [...this.#hung]) fail(new TransportError('connection reset (fault injection healed)'));
    this.#hung.clear();
  }

  /** Adds `ms` of latency (on the injected clock) before every call is forwarded; `0` removes it. */
  latency(ms: number): void {
    if (typeof ms !== 'number' || !(ms >= 0 && ms <= MAX_TIMER_MS)) {
      throw new InvalidArgumentError('ms', `must be a number from 0 to ${MAX_TIMER_MS}, got ${shown(ms)}`);
    }
    this.#latencyMs = ms;
  }

  /** Renewals are swallowed, never reach the service and never answer, while `on`. */
  dropRenewals(on = true): void {
    if (typeof on !== 'boolean') throw new InvalidArgumentError('on', `must be a boolean, got ${shown(on)}`);
    this.#dropRenewals = on;
  }

  /** The next `n` calls fail with a `TransportError`; `0` cancels the ones still to come. */
  failNext(n: number): void {
    if (!Number.isSafeInteger(n) || n < 0) {
      throw new InvalidArgumentError('n', `must be a whole number from 0, got ${shown(n)}`);
    }
    this.#failNext = n;
  }

  /**
   * Watch subscriptions (`watch`, `watchChanges`) fail while set: `'throw'` makes new subscriptions throw a
   * `TransportError`, `'silent'` keeps every subscription, old and new, from delivering notices. `false` restores.
   */
  failWatches(mode: WatchFault | false = 'throw'): void {
    if (mode !== 'throw' && mode !== 'silent' && mode !== false) {
      throw new InvalidArgumentError('mode', `must be 'throw', 'silent' or false, got ${shown(mode)}`);
    }
    this.#watchFault = mode === false ? undefined : mode;
  }

  /** The call counters so far; a live view that keeps counting, not a snapshot. */
  get counts(): CallCounts {
    return this.#counts;
  }

  /** Forwards `request` through the current faults; counted as `acquire`. */
  acquire(request: AcquireRequest): Promise<AcquireResult> {
    return this.#call('acquire', () => this.#inner.acquire(request));
  }

  renew(request: RenewRequest): Promise<RenewResult> {
    return this.#call('renew', () => this.#inner.renew(request));
  }

  release(lease: Lease): Promise<boolean> {
    return this.#call('release', () => this.#inner.release(lease));
  }

  watch(name: string, onReleased: () => void): () => void {
    return this.#subscribe('watch', onReleased, (notify) => this.#inner.watch(name, notify));
  }

  #subscribe(
    method: 'watch' | 'watchChanges',
    onNotice: () => void,
    subscribe: (notify: () => void) => () => void,
  ): () => void {
    this.#counts.attempted.watch += 1;
    if (this.#watchFault === 'throw') throw new TransportError(`injected failure of ${method}`);
    this.#counts.forwarded.watch += 1;
    // Notices cross neither a partition nor a silenced watch. What the callback returned goes back to the inner
    // service, as if it had been handed the callback itself: its guard then sees an async callback's rejection,
    // which dropped here would be an unhandled rejection (Node's default ends the process).
    return subscribe(() => {
      if (!this.#partition && this.#watchFault !== 'silent') return onNotice();
    });
  }

  async #call<T>(method: ServiceMethod, forward: () => Promise<T>, weight = 1): Promise<T> {
    this.#counts.attempted[method] += weight;
    if (this.#failNext > 0) {
      this.#failNext -= 1;
      throw new TransportError(`injected failure of ${method}`);
    }
    if (this.#partition === 'fail') throw new TransportError(`injected partition: ${method} refused`);
    if (this.#partition === 'hang' || (method === 'renew' && this.#dropRenewals)) return this.#hang();
    if (this.#latencyMs > 0) await this.#clock.sleep(this.#latencyMs);
    this.#counts.forwarded[method] += weight;
    return forward();
  }

  #hang<T>(): Promise<T> {
    return new Promise<T>((_resolve, reject) => {
      this.#hung.add(reject);
    });
  }
}

/** How a refused value reads in its error message: strings quoted, so a typo stands out. */
function shown(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : textOf(value);
}

function isLockService(value: unknown): value is LockService {
  if (typeof value !== 'object' || value === null) return false;
  const service = value as Readonly<Record<string, unknown>>;
  return ['acquire', 'renew', 'release', 'watch'].every((method) => typeof service[method] === 'function');
}
