import type { Clock } from '@dlock/core';

/**
 * Which lock parents this service uses (attempts and grants per parent), and which have been idle long enough to
 * delete. Parent nodes would otherwise pile up forever, one per lock name ever used: the 1.1.3 client cannot make
 * container nodes, which ZooKeeper would delete by itself.
 */
export class ParentUse {
  readonly #clock: Clock;
  readonly #idleMs: number;
  readonly #wake: () => void;
  readonly #users = new Map<string, number>();
  readonly #idleSince = new Map<string, number>();

  constructor(clock: Clock, idleMs: number, wake: () => void) {
    this.#clock = clock;
    this.#idleMs = idleMs;
    this.#wake = wake;
  }

  /** Parents waiting for their idle time to pass. */
  get idle(): number {
    return this.#idleSince.size;
  }

  /** True while this service uses the parent or will delete it itself once idle. */
  knows(parent: string): boolean {
    return this.#users.has(parent) || this.#idleSince.has(parent);
  }

  use(parent: string): void {
    this.#users.set(parent, (this.#users.get(parent) ?? 0) + 1);
    this.#idleSince.delete(parent);
  }

  unuse(parent: string): void {
    const count = (this.#users.get(parent) ?? 1) - 1;
    if (count > 0) {
      this.#users.set(parent, count);
      return;
    }
    this.#users.delete(parent);
    this.#idleSince.set(parent, this.#clock.monotonic() + this.#idleMs);
    this.#wake();
  }

  /** Removes and returns the parents whose idle time has passed (all idle ones with `now` = Infinity). */
  takeDue(now: number): string[] {
    const due: string[] = [];
    for (const [parent, dueAt] of this.#idleSince) {
      if (now < dueAt) continue;
      this.#idleSince.delete(parent);
      due.push(parent);
    }
    return due;
  }
}

/**
 * One unref'd timer for all of a service's housekeeping: heartbeats, local session-expiry detection, reaping
 * unrenewed leases and removing idle parents. It runs while `tick()` says there is work and stops by itself when
 * idle; `wake()` restarts it. (Call deadlines are core's `CallDeadlines`, which keep their own single timer.)
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
          // A bug in housekeeping must not stop the session's liveness checks.
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
