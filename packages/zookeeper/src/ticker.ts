import type { Clock } from '@dlock/core';

/**
 * One unref'd timer for all of a service's housekeeping: call deadlines, heartbeats, local session-expiry
 * detection, reaping unrenewed leases and removing idle parents. It runs while `tick()` says there is work and
 * stops by itself when idle; `wake()` restarts it. One timer per tick instead of one per call keeps the hot path
 * free of `setTimeout`/`clearTimeout` pairs.
 */
export class Ticker {
  readonly #clock: Clock;
  readonly #intervalMs: () => number;
  readonly #tick: () => boolean;
  #running: AbortController | undefined;
  #closed = false;

  constructor(clock: Clock, intervalMs: () => number, tick: () => boolean) {
    this.#clock = clock;
    this.#intervalMs = intervalMs;
    this.#tick = tick;
  }

  wake(): void {
    if (this.#running || this.#closed) return;
    const controller = new AbortController();
    this.#running = controller;
    void this.#run(controller);
  }

  close(): void {
    this.#closed = true;
    this.#running?.abort();
    this.#running = undefined;
  }

  async #run(controller: AbortController): Promise<void> {
    try {
      for (;;) {
        await this.#clock.sleep(this.#intervalMs(), controller.signal, { unref: true });
        let more: boolean;
        try {
          more = this.#tick();
        } catch (error) {
          // A bug in housekeeping must not stop the deadlines that bound every call.
          process.emitWarning(`@dlock/zookeeper: housekeeping failed: ${String(error)}`, 'DLockWarning');
          more = true;
        }
        if (!more) break;
      }
    } catch {
      // aborted by close()
    } finally {
      if (this.#running === controller) this.#running = undefined;
    }
  }
}

interface Deadline {
  readonly at: number;
  readonly expire: () => void;
}

/** Deadlines checked on each tick: a call expires at most one tick late, which is fine for bounds of seconds. */
export class Deadlines {
  readonly #entries = new Set<Deadline>();

  get size(): number {
    return this.#entries.size;
  }

  add(at: number, expire: () => void): Deadline {
    const entry = { at, expire };
    this.#entries.add(entry);
    return entry;
  }

  delete(entry: Deadline): void {
    this.#entries.delete(entry);
  }

  expire(now: number): void {
    for (const entry of this.#entries) {
      if (entry.at <= now) {
        this.#entries.delete(entry);
        entry.expire();
      }
    }
  }
}
