import type { Clock } from '../clock.js';
import { PermitsMismatchError } from '../errors.js';
import type { QueueDriver, Standing } from '../queue/queue-driver.js';
import type {
  Grant,
  Lease,
  PermitHolder,
  PermitRequest,
  PermitsInfo,
  RenewRequest,
  RenewResult,
} from '../service.js';
import { WakeSignal } from '../wake-signal.js';

interface SlotLease {
  readonly ownerId: string;
  readonly ownershipToken: string;
  readonly fencingToken: bigint;
  expiresAt: number;
  readonly metadata: string | undefined;
}

/** One attempt's place in a semaphore's queue; `granted` is set once it holds a slot. */
interface Claim {
  readonly request: PermitRequest;
  /** When the acquire call began: a grant reports how long after that its TTL started (`queuedMs`). */
  readonly startedAt: number;
  readonly ownershipToken: string;
  readonly wake: WakeSignal;
  granted: Grant | undefined;
}

interface SemaphoreState {
  /** The limit the current holders and waiters were admitted with; forgotten when the semaphore is idle. */
  readonly permits: number;
  readonly slots: (SlotLease | undefined)[];
  readonly queue: Claim[];
}

/**
 * The in-process semaphores of `MemoryLockService`, as a queue driver for core's `acquireInQueue`: the reference for
 * what a backend's semaphore protocol does, with every operation atomic because it runs synchronously. A released or
 * expired slot goes to the head of the queue, which alone is woken; a caller that does not wait never overtakes it.
 */
export class MemorySemaphores implements QueueDriver<Claim, Claim> {
  readonly #clock: Clock;
  readonly #mint: () => bigint;
  readonly #newOwnershipToken: () => string;
  readonly #states = new Map<string, SemaphoreState>();

  constructor(clock: Clock, mint: () => bigint, newOwnershipToken: () => string) {
    this.#clock = clock;
    this.#mint = mint;
    this.#newOwnershipToken = newOwnershipToken;
  }

  /** No I/O: a random ownership token names the attempt. */
  claim(request: PermitRequest, context: { readonly startedAt: number }): Claim {
    return {
      request,
      startedAt: context.startedAt,
      ownershipToken: this.#newOwnershipToken(),
      wake: new WakeSignal(),
      granted: undefined,
    };
  }

  /** Takes a free slot when nobody queues; otherwise joins the back of the queue (unless the caller does not wait). */
  async enqueue(claim: Claim, options: { readonly queue: boolean }): Promise<Standing<Claim>> {
    const state = this.#state(claim.request);
    if (state.queue.length === 0) {
      const grant = this.#take(state, claim);
      if (grant) return { kind: 'first', grant };
    }
    if (options.queue) state.queue.push(claim);
    return this.#behind(state, claim);
  }

  /** The head of the queue takes a free slot; anyone else stays behind. A claim no longer queued is gone. */
  async check(claim: Claim): Promise<Standing<Claim>> {
    if (claim.granted) return { kind: 'first', grant: claim.granted };
    const state = this.#states.get(claim.request.name);
    if (!state?.queue.includes(claim)) return { kind: 'gone' };
    this.#purge(state);
    if (state.queue[0] === claim) {
      const grant = this.#take(state, claim);
      if (grant) {
        state.queue.shift();
        // The next waiter only has something to do if another slot is free too.
        if (state.slots.includes(undefined)) this.#wakeHead(state);
        return { kind: 'first', grant };
      }
    }
    return this.#behind(state, claim);
  }

  /** Until woken (the head changed, a slot was freed) or, for the head, until the earliest slot lease runs out. */
  async wait(claim: Claim, _wait: Claim, ms: number, signal: AbortSignal): Promise<undefined> {
    const state = this.#states.get(claim.request.name);
    const untilExpiry = state?.queue[0] === claim ? this.#earliestExpiry(state) : undefined;
    await claim.wake.wait(this.#clock, untilExpiry === undefined ? ms : Math.min(ms, untilExpiry), signal);
    return undefined;
  }

  /** Leaves the queue and gives back a slot granted to this claim meanwhile. */
  async leave(claim: Claim): Promise<void> {
    const state = this.#states.get(claim.request.name);
    if (!state) return;
    const at = state.queue.indexOf(claim);
    if (at >= 0) state.queue.splice(at, 1);
    const slot = claim.granted?.slot;
    if (slot !== undefined && state.slots[slot]?.ownershipToken === claim.ownershipToken)
      state.slots[slot] = undefined;
    if (at === 0 || slot !== undefined) this.#wakeHead(state);
    this.#forgetIfIdle(claim.request.name, state);
  }

  renew(request: RenewRequest): RenewResult {
    const held = this.#held(request.lease);
    if (!held) return { renewed: false };
    held.expiresAt = this.#clock.monotonic() + request.ttlMs;
    return { renewed: true };
  }

  release(lease: Lease): boolean {
    const state = this.#states.get(lease.name);
    if (!state || !this.#held(lease) || lease.slot === undefined) return false;
    state.slots[lease.slot] = undefined;
    this.#wakeHead(state);
    this.#forgetIfIdle(lease.name, state);
    return true;
  }

  available(name: string, permits: number): number {
    let state = this.#states.get(name);
    if (state) {
      // Leases that ran out first: a semaphore idle since then takes any limit, as an acquire would.
      this.#purge(state);
      this.#forgetIfIdle(name, state);
      state = this.#states.get(name);
    }
    if (!state) return permits;
    if (state.permits !== permits) throw new PermitsMismatchError(name, permits, state.permits);
    return state.slots.reduce((free, slot) => (slot ? free : free + 1), 0);
  }

  /** The open permits by slot and the queue's length; checks the limit as `available` does. */
  inspect(name: string, permits: number): PermitsInfo {
    this.available(name, permits);
    const state = this.#states.get(name);
    if (!state) return { permits, held: [], waiters: 0 };
    const now = this.#clock.monotonic();
    const held: PermitHolder[] = [];
    state.slots.forEach((lease, slot) => {
      if (!lease) return;
      const holder = {
        slot,
        ownerId: lease.ownerId,
        fencingToken: lease.fencingToken,
        expiresInMs: lease.expiresAt - now,
      };
      held.push(lease.metadata === undefined ? holder : { ...holder, metadata: lease.metadata });
    });
    return { permits, held, waiters: state.queue.length };
  }

  /** The semaphore's state, made for this limit when idle; a limit that differs from the stored one is refused. */
  #state(request: PermitRequest): SemaphoreState {
    let state = this.#states.get(request.name);
    if (state) {
      this.#purge(state);
      this.#forgetIfIdle(request.name, state);
      state = this.#states.get(request.name);
    }
    if (!state) {
      state = { permits: request.permits, slots: new Array(request.permits).fill(undefined), queue: [] };
      this.#states.set(request.name, state);
    } else if (state.permits !== request.permits) {
      throw new PermitsMismatchError(request.name, request.permits, state.permits);
    }
    return state;
  }

  #take(state: SemaphoreState, claim: Claim): Grant | undefined {
    const slot = state.slots.indexOf(undefined);
    if (slot < 0) return undefined;
    const { ttlMs, ownerId, metadata } = claim.request;
    const fencingToken = this.#mint();
    const now = this.#clock.monotonic();
    const { ownershipToken } = claim;
    state.slots[slot] = { ownerId, ownershipToken, fencingToken, expiresAt: now + ttlMs, metadata };
    const queuedMs = now - claim.startedAt;
    claim.granted = { ownershipToken: claim.ownershipToken, fencingToken, ttlMs, slot, queuedMs };
    return claim.granted;
  }

  #behind(state: SemaphoreState, claim: Claim): Standing<Claim> {
    const hint = this.#earliestExpiry(state);
    return hint === undefined
      ? { kind: 'behind', wait: claim }
      : { kind: 'behind', wait: claim, holderExpiresInMs: hint };
  }

  #held(lease: Lease): SlotLease | undefined {
    const state = this.#states.get(lease.name);
    if (!state || lease.slot === undefined) return undefined;
    this.#purge(state);
    const held = state.slots[lease.slot];
    return held?.ownershipToken === lease.ownershipToken ? held : undefined;
  }

  /** Frees slots whose lease ran out; the head is woken to take one. */
  #purge(state: SemaphoreState): void {
    const now = this.#clock.monotonic();
    let freed = false;
    state.slots.forEach((slot, index) => {
      if (slot && slot.expiresAt <= now) {
        state.slots[index] = undefined;
        freed = true;
      }
    });
    if (freed) this.#wakeHead(state);
  }

  #earliestExpiry(state: SemaphoreState): number | undefined {
    let earliest: number | undefined;
    for (const slot of state.slots) {
      if (slot && (earliest === undefined || slot.expiresAt < earliest)) earliest = slot.expiresAt;
    }
    return earliest === undefined ? undefined : Math.max(0, earliest - this.#clock.monotonic());
  }

  #wakeHead(state: SemaphoreState): void {
    state.queue[0]?.wake.notify();
  }

  #forgetIfIdle(name: string, state: SemaphoreState): void {
    if (state.queue.length === 0 && state.slots.every((slot) => slot === undefined))
      this.#states.delete(name);
  }
}
