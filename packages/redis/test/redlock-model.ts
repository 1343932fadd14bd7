import type {
  NodeAcquire,
  NodeAcquireReply,
  NodeConfirm,
  NodeMint,
  NodeRelease,
  NodeReleaseReply,
  NodeRenew,
  NodeRenewReply,
  RedlockNode,
} from '../src/redlock/node.js';

/**
 * In-process Redlock nodes with the same semantics as the Lua scripts, for property tests of the quorum algorithm.
 * Time is the world's, in microseconds, advanced by every node call (1 µs), by restarts and by the test.
 */

/**
 * What happens to one node call: answered, lost before it ran, run with its reply lost (ambiguous), or run on a
 * node that has just restarted empty (a restart between the rounds of an acquire, or under a held lease).
 */
export type Fault = 'ok' | 'drop-request' | 'drop-reply' | 'restart';

export class World {
  /** The shared clock nodes seed counters from, in µs since the epoch. */
  nowUs = 1_700_000_000_000_000;
  #faults: readonly Fault[] = [];
  #next = 0;

  /** Calls take their fate from this list in order, then succeed. */
  setFaults(faults: readonly Fault[]): void {
    this.#faults = faults;
    this.#next = 0;
  }

  nextFault(): Fault {
    return this.#faults[this.#next++] ?? 'ok';
  }
}

interface Entry {
  readonly owner: string;
  expiresAtUs: number;
  /** Set again by a renewal, and no majority-confirmed renewal since (the scripts' `<token> r` value). */
  retaken: boolean;
}

export class ModelNode implements RedlockNode {
  down = false;
  readonly #world: World;
  readonly #seedFromClock: boolean;
  readonly #locks = new Map<string, Entry>();
  readonly #fences = new Map<string, bigint>();

  /** `seedFromClock: false` seeds a missing counter with 0, as a plain INCR counter would restart. */
  constructor(world: World, options: { seedFromClock: boolean }) {
    this.#world = world;
    this.#seedFromClock = options.seedFromClock;
  }

  /** Loses every key, as a restart without persistence does; a restart takes time. */
  restart(): void {
    this.#locks.clear();
    this.#fences.clear();
    this.down = false;
    this.#world.nowUs += 50_000;
  }

  holds(name: string): string | undefined {
    return this.#live(name)?.owner;
  }

  acquire(request: NodeAcquire): Promise<NodeAcquireReply> {
    return this.#op(() => {
      const current = this.#live(request.name);
      if (current) {
        return { granted: false, holderTtlMs: Math.ceil((current.expiresAtUs - this.#world.nowUs) / 1000) };
      }
      this.#set(request.name, request.ownershipToken, request.ttlMs);
      return { granted: true, counter: this.#fence(request.name) };
    });
  }

  mint(request: NodeMint): Promise<boolean> {
    return this.#op(() => {
      if (this.#live(request.name)?.owner !== request.ownershipToken) return false;
      const counter = this.#fences.get(request.name);
      if (counter !== undefined && counter >= request.fencingToken) return false;
      this.#fences.set(request.name, request.fencingToken);
      return true;
    });
  }

  renew(requests: readonly NodeRenew[]): Promise<readonly NodeRenewReply[]> {
    return this.#op(() =>
      requests.map((request): NodeRenewReply => {
        const current = this.#live(request.name);
        if (current?.owner === request.ownershipToken) {
          current.expiresAtUs = this.#world.nowUs + request.ttlMs * 1000;
          return current.retaken ? 'retaken' : 'extended';
        }
        if (current) return 'refused';
        this.#set(request.name, request.ownershipToken, request.ttlMs, true);
        if (this.#fence(request.name) < request.fencingToken) {
          this.#fences.set(request.name, request.fencingToken);
        }
        return 'retaken';
      }),
    );
  }

  release(request: NodeRelease): Promise<NodeReleaseReply> {
    return this.#op(() => {
      const current = this.#live(request.name);
      if (current === undefined) return 'absent';
      if (current.owner !== request.ownershipToken) return 'other';
      this.#locks.delete(request.name);
      return current.retaken ? 'retaken' : 'deleted';
    });
  }

  confirm(requests: readonly NodeConfirm[]): Promise<void> {
    return this.#op(() => {
      for (const request of requests) {
        const current = this.#live(request.name);
        if (current?.owner === request.ownershipToken) current.retaken = false;
      }
    });
  }

  async #op<T>(apply: () => T): Promise<T> {
    this.#world.nowUs += 1;
    if (this.down) throw new Error('node down');
    const fault = this.#world.nextFault();
    if (fault === 'drop-request') throw new Error('request lost');
    if (fault === 'restart') this.restart();
    const value = apply();
    if (fault === 'drop-reply') throw new Error('reply lost');
    return value;
  }

  #live(name: string): Entry | undefined {
    const entry = this.#locks.get(name);
    if (entry && entry.expiresAtUs <= this.#world.nowUs) {
      this.#locks.delete(name);
      return undefined;
    }
    return entry;
  }

  #set(name: string, owner: string, ttlMs: number, retaken = false): void {
    this.#locks.set(name, { owner, expiresAtUs: this.#world.nowUs + ttlMs * 1000, retaken });
  }

  /** The counter, seeded if missing: from the clock like the scripts, or from 0 for the negative control. */
  #fence(name: string): bigint {
    let counter = this.#fences.get(name);
    if (counter === undefined) {
      counter = this.#seedFromClock ? BigInt(this.#world.nowUs) : 0n;
      this.#fences.set(name, counter);
    }
    return counter;
  }
}
