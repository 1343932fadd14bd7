import { randomBytes } from 'node:crypto';
import { type Clock, systemClock } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import { callSubscriber } from '../events.js';
import { rejectUnknownKeys, unreadableOptions } from '../option-keys.js';
import { validateMetadata, validateName, validateOwnerId } from '../options.js';
import { acquireInQueue } from '../queue/acquire-in-queue.js';
import { BackgroundRetries } from '../queue/background-retries.js';
import { validatePermits } from '../semaphore/options.js';
import type {
  AcquireRequest,
  AcquireResult,
  Lease,
  LockInfo,
  LockService,
  PermitRequest,
  PermitsInfo,
  RenewRequest,
  RenewResult,
} from '../service.js';
import { MemorySemaphores } from './memory-semaphores.js';

interface Entry {
  readonly ownerId: string;
  readonly ownershipToken: string;
  readonly fencingToken: bigint;
  expiresAt: number;
  metadata: string | undefined;
}

/** Options of a {@link MemoryLockService}. Unknown keys are refused with `InvalidArgumentError`. */
export interface MemoryLockServiceOptions {
  /** Time source for lease expiry. Share a `FakeClock` with the clients to drive expiry in tests. */
  readonly clock?: Clock;
}

/**
 * A real lock service inside one process: ownership-checked renew and release, TTL expiry on the injected clock,
 * strictly increasing fencing tokens and release notices. For tests, examples and single-process apps; it offers
 * no cross-process exclusion.
 *
 * Tokens come from one counter for all names, so they are increasing per name and never reused within the
 * lifetime of the service object.
 *
 * Called directly, it refuses the names, owner ids, metadata and limits a `LockClient` would refuse, with
 * `InvalidArgumentError` before any state changes, as every backend does: a test that passes against it must not fail
 * against a real one.
 */
export class MemoryLockService implements LockService {
  readonly #clock: Clock;
  readonly #locks = new Map<string, Entry>();
  readonly #watchers = new Map<string, Set<() => void>>();
  readonly #changeWatchers = new Map<string, Set<() => void>>();
  #lastToken = 0n;
  /** Ownership tokens are this random prefix plus the fencing token: unique, unguessable, and cheap to make. */
  readonly #tokenPrefix = randomBytes(16).toString('base64url');

  readonly #semaphores: MemorySemaphores;
  readonly #cleanups: BackgroundRetries;

  constructor(options: MemoryLockServiceOptions = {}) {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    let clock: Clock | undefined;
    try {
      rejectUnknownKeys(options, 'options', ['clock']);
      clock = options.clock;
    } catch (error) {
      throw unreadableOptions(error, 'options');
    }
    this.#clock = clock ?? systemClock;
    this.#semaphores = new MemorySemaphores(
      this.#clock,
      () => {
        this.#lastToken += 1n;
        return this.#lastToken;
      },
      () => `${this.#tokenPrefix}.p${randomBytes(6).toString('base64url')}`,
    );
    // Nothing here can fail to leave; the queue algorithm still wants somewhere to retry.
    this.#cleanups = new BackgroundRetries(this.#clock);
  }

  /** A permit of a semaphore, FIFO: core's queue algorithm over the in-process semaphore driver. */
  async acquirePermit(request: PermitRequest): Promise<AcquireResult> {
    validateRequest(request);
    validatePermits(request.permits, 'request.permits');
    return acquireInQueue(this.#semaphores, request, {
      clock: this.#clock,
      cleanups: this.#cleanups,
      cleanupHorizonMs: (r) => r.ttlMs,
    });
  }

  async availablePermits(name: string, permits: number): Promise<number> {
    validateName(name);
    validatePermits(permits, 'permits');
    return this.#semaphores.available(name, permits);
  }

  async inspectPermits(name: string, permits: number): Promise<PermitsInfo> {
    validateName(name);
    validatePermits(permits, 'permits');
    return this.#semaphores.inspect(name, permits);
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    validateRequest(request);
    const current = this.#live(request.name);
    if (current) return { acquired: false, holderExpiresInMs: current.expiresAt - this.#clock.monotonic() };
    this.#lastToken += 1n;
    const entry: Entry = {
      ownerId: request.ownerId,
      ownershipToken: `${this.#tokenPrefix}.${this.#lastToken}`,
      fencingToken: this.#lastToken,
      expiresAt: this.#clock.monotonic() + request.ttlMs,
      metadata: request.metadata,
    };
    this.#locks.set(request.name, entry);
    this.#changed(request.name);
    return {
      acquired: true,
      grant: { ownershipToken: entry.ownershipToken, fencingToken: entry.fencingToken, ttlMs: request.ttlMs },
    };
  }

  async renew(request: RenewRequest): Promise<RenewResult> {
    return this.#renew(request);
  }

  async renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return requests.map((request) => this.#renew(request));
  }

  async release(lease: Lease): Promise<boolean> {
    if (lease.slot !== undefined) return this.#semaphores.release(lease);
    const current = this.#live(lease.name);
    if (current?.ownershipToken !== lease.ownershipToken) return false;
    this.#locks.delete(lease.name);
    this.#notify(lease.name);
    return true;
  }

  watch(name: string, onReleased: () => void): () => void {
    validateName(name);
    return subscribe(this.#watchers, name, onReleased);
  }

  async inspect(name: string): Promise<LockInfo> {
    validateName(name);
    const current = this.#live(name);
    if (!current) return { held: false };
    // No waiters: this service does not queue for locks (core's wait loop retries), so it cannot count them.
    return {
      held: true,
      ownerId: current.ownerId,
      fencingToken: current.fencingToken,
      expiresInMs: current.expiresAt - this.#clock.monotonic(),
      ...(current.metadata === undefined ? {} : { metadata: current.metadata }),
    };
  }

  async updateMetadata(lease: Lease, metadata: string): Promise<boolean> {
    validateMetadata(metadata, 'metadata');
    const current = this.#live(lease.name);
    if (current?.ownershipToken !== lease.ownershipToken) return false;
    current.metadata = metadata;
    this.#changed(lease.name);
    return true;
  }

  watchChanges(name: string, onChange: () => void): () => void {
    validateName(name);
    return subscribe(this.#changeWatchers, name, onChange);
  }

  /** The fencing token of the current live holder of `name`, if any. For tests and diagnostics. */
  holder(name: string): bigint | undefined {
    return this.#live(name)?.fencingToken;
  }

  #renew(request: RenewRequest): RenewResult {
    if (request.lease.slot !== undefined) return this.#semaphores.renew(request);
    const current = this.#live(request.lease.name);
    if (current?.ownershipToken !== request.lease.ownershipToken) return { renewed: false };
    current.expiresAt = this.#clock.monotonic() + request.ttlMs;
    return { renewed: true };
  }

  /** The entry if it has not expired; an expired entry is dropped (and its waiters told) on first sight. */
  #live(name: string): Entry | undefined {
    const entry = this.#locks.get(name);
    if (!entry) return undefined;
    if (this.#clock.monotonic() < entry.expiresAt) return entry;
    this.#locks.delete(name);
    this.#notify(name);
    return undefined;
  }

  #notify(name: string): void {
    this.#changed(name);
    const watchers = this.#watchers.get(name);
    if (!watchers) return;
    // Deliver after the current operation completes, as a remote service would. `watch` is public: a callback's
    // throw or rejection has nobody to go to, and would end the process from the microtask.
    for (const watcher of [...watchers]) queueMicrotask(() => callSubscriber(watcher));
  }

  #changed(name: string): void {
    const watchers = this.#changeWatchers.get(name);
    if (!watchers) return;
    for (const watcher of [...watchers]) queueMicrotask(() => callSubscriber(watcher));
  }
}

function subscribe(map: Map<string, Set<() => void>>, name: string, callback: () => void): () => void {
  let set = map.get(name);
  if (!set) {
    set = new Set();
    map.set(name, set);
  }
  const listener = (): void => callback();
  set.add(listener);
  return () => {
    const listeners = map.get(name);
    listeners?.delete(listener);
    if (listeners?.size === 0) map.delete(name);
  };
}

/** The request's name, owner id and metadata as core checks them for a `LockClient`. */
function validateRequest(request: AcquireRequest): void {
  validateName(request.name, 'request.name');
  validateOwnerId(request.ownerId, 'request.ownerId');
  if (request.metadata !== undefined) validateMetadata(request.metadata, 'request.metadata');
}
