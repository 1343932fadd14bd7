import { type LockInfo, quietUnsubscribe } from '../service.js';
import type { ElectionHost } from './election-host.js';

/** The leader of an election as the service reports it. */
export interface Leader {
  /** What the leader proclaimed (its campaign's `value`, or the last `proclaim`). */
  readonly value: string;
  /** The leadership's fencing token: strictly increasing across successive leaders. */
  readonly epoch: bigint;
}

export interface LeaderSink {
  next(leader: Leader | null): void;
  /** The feed stopped for good (the client closed). */
  end(error: Error): void;
}

/** A lock's state as a leader, or null while nobody leads. */
export function leaderOf(info: LockInfo): Leader | null {
  if (!info.held || info.fencingToken === undefined) return null;
  return { value: info.metadata ?? '', epoch: info.fencingToken };
}

function same(a: Leader | null, b: Leader | null): boolean {
  if (a === null || b === null) return a === b;
  return a.epoch === b.epoch && a.value === b.value;
}

/**
 * One election's leader as seen by one client, shared by every observer in it: one change subscription to the
 * service (`watchChanges`, or release notices) and one poll per half lease — an expiry with no release sends no
 * notice on some services — however many observers there are. Each notice is answered by reading the leader from
 * the service; reads are coalesced, and a read that reports an older epoch than one already delivered is dropped,
 * so observers never see leadership go back.
 */
export class LeaderFeed {
  readonly #name: string;
  readonly #host: ElectionHost;
  readonly #pollMs: number;
  readonly #onIdle: () => void;
  readonly #sinks = new Map<LeaderSink, { first: boolean }>();
  /** The last leader delivered to every sink, undefined before the first read. */
  #last: Leader | null | undefined;
  #reading = false;
  #again = false;
  #stop: AbortController | undefined;
  #unwatch: (() => void) | undefined;
  readonly #onClose = (): void => {
    this.#stopAll();
  };

  constructor(name: string, host: ElectionHost, pollMs: number, onIdle: () => void) {
    this.#name = name;
    this.#host = host;
    this.#pollMs = pollMs;
    this.#onIdle = onIdle;
  }

  subscribe(sink: LeaderSink): () => void {
    const { closing } = this.#host;
    if (closing.aborted) {
      // An observer that begins after close() (observe() was called before it, iterated after): end it as close
      // ends the others, and start no poll, which nothing would ever stop.
      sink.end(closing.reason instanceof Error ? closing.reason : new Error('closed'));
      return () => {};
    }
    this.#sinks.set(sink, { first: true });
    if (this.#stop === undefined) this.#start();
    this.poke();
    return () => {
      if (!this.#sinks.delete(sink) || this.#sinks.size > 0) return;
      this.#stopAll();
    };
  }

  /** Something may have changed: read the leader (once more if a read is already under way). */
  poke(): void {
    if (this.#stop === undefined) return;
    if (this.#reading) {
      this.#again = true;
      return;
    }
    void this.#readLoop();
  }

  #start(): void {
    const stop = new AbortController();
    this.#stop = stop;
    const { service } = this.#host;
    const onChange = (): void => this.poke();
    try {
      this.#unwatch = quietUnsubscribe(
        service.watchChanges?.(this.#name, onChange) ?? service.watch(this.#name, onChange),
      );
    } catch {
      // Notices are an optimisation: the poll below still sees every change within half a lease.
      this.#unwatch = undefined;
    }
    this.#host.closing.addEventListener('abort', this.#onClose, { once: true });
    void this.#poll(stop.signal);
  }

  async #poll(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#host.clock.sleep(this.#pollMs, signal);
      } catch {
        return;
      }
      this.poke();
    }
  }

  async #readLoop(): Promise<void> {
    this.#reading = true;
    try {
      do {
        this.#again = false;
        let leader: Leader | null;
        try {
          const { service } = this.#host;
          const inspect = service.inspect as NonNullable<typeof service.inspect>;
          leader = leaderOf(
            await this.#host.call(() => inspect.call(service, this.#name), `leader of "${this.#name}"`),
          );
        } catch {
          // Unreachable service or closed client: the next notice or poll reads again; close ends the feed itself.
          continue;
        }
        this.#publish(leader);
      } while (this.#again && this.#stop !== undefined);
    } finally {
      this.#reading = false;
    }
  }

  #publish(leader: Leader | null): void {
    const last = this.#last;
    // A read that raced a newer one (or a stale replica) must not take an observer back in time.
    const older = leader !== null && last != null && leader.epoch < last.epoch;
    const changed = !older && (last === undefined || !same(last, leader));
    if (changed) this.#last = leader;
    const current = this.#last;
    if (current === undefined) return;
    for (const [sink, state] of [...this.#sinks]) {
      if (!changed && !state.first) continue;
      state.first = false;
      try {
        sink.next(current);
      } catch {
        // a sink is an observer's queue: it does not throw
      }
    }
  }

  #stopAll(): void {
    const stop = this.#stop;
    if (stop === undefined) return;
    this.#stop = undefined;
    stop.abort();
    this.#unwatch?.();
    this.#unwatch = undefined;
    this.#host.closing.removeEventListener('abort', this.#onClose);
    this.#last = undefined;
    if (this.#host.closing.aborted) {
      const error =
        this.#host.closing.reason instanceof Error ? this.#host.closing.reason : new Error('closed');
      for (const sink of [...this.#sinks.keys()]) sink.end(error);
    }
    this.#sinks.clear();
    this.#onIdle();
  }
}
