import { TransportError } from '@dlock/core';

interface Entry {
  readonly at: number;
  readonly expire: () => void;
}

/**
 * Bounds every Redis call the adapter makes with one shared timer. node-redis' own `timeout` only covers a command
 * that has not been written yet: a written command whose reply never comes (server paused, packets dropped) waits
 * forever. A timer per call would cost a `setTimeout`/`clearTimeout` pair per command; here a call adds and removes
 * a set entry, and the one timer is re-armed only when an earlier deadline arrives or when it fires.
 */
export class Deadlines {
  readonly #entries = new Set<Entry>();
  #armedAt = Number.POSITIVE_INFINITY;
  #timer: NodeJS.Timeout | undefined;

  /**
   * Settles like `promise`, or rejects with a `TransportError` after `timeoutMs`. The late outcome is dropped
   * (never an unhandled rejection); the caller decides what an unknown outcome means.
   */
  bound<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const entry: Entry = {
        at: performance.now() + timeoutMs,
        expire: () => {
          if (settled) return;
          settled = true;
          reject(new TransportError(`${what} did not answer within ${Math.round(timeoutMs)} ms`));
        },
      };
      this.#entries.add(entry);
      if (entry.at < this.#armedAt) this.#arm(entry.at);
      promise.then(
        (value) => {
          this.#entries.delete(entry);
          if (settled) return;
          settled = true;
          resolve(value);
        },
        (error: unknown) => {
          this.#entries.delete(entry);
          if (settled) return;
          settled = true;
          reject(error);
        },
      );
    });
  }

  #arm(at: number): void {
    this.#disarm();
    this.#armedAt = at;
    // Unref'd: a call in flight is kept alive by its socket, not by its deadline.
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, at - performance.now()) + 1).unref();
  }

  #disarm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedAt = Number.POSITIVE_INFINITY;
  }

  #fire(): void {
    this.#timer = undefined;
    this.#armedAt = Number.POSITIVE_INFINITY;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const entry of [...this.#entries]) {
      if (entry.at <= now) {
        this.#entries.delete(entry);
        entry.expire();
      } else if (entry.at < next) {
        next = entry.at;
      }
    }
    if (next < Number.POSITIVE_INFINITY) this.#arm(next);
  }
}
