/** How long a read's view of the taken slots steers the next guess: other holders come and go. */
const SEEN_MS = 1_000;
/** Semaphores whose last read is remembered, at most (the oldest is forgotten first). */
const SEEN_MAX = 1_000;

/**
 * Where to try first: slots this service holds or is trying (counted: a slot can be tried by one claim and, for a
 * moment, held by another), and the slots the last read of the semaphore's slot keys showed taken, for a second.
 * Only a guess at a free slot: a wrong one costs the uncontended path a second transaction, never correctness.
 */
export class SlotHints {
  readonly #used = new Map<string, Map<number, number>>();
  readonly #seen = new Map<string, { readonly taken: ReadonlySet<number>; readonly at: number }>();

  /**
   * The lowest slot neither used here nor seen taken within the last second; else the lowest not used here; slot 0
   * when this service uses them all.
   */
  guess(key: string, permits: number, now: number): number {
    const used = this.#used.get(key);
    let seen = this.#seen.get(key);
    if (seen && now - seen.at > SEEN_MS) {
      this.#seen.delete(key);
      seen = undefined;
    }
    let fallback: number | undefined;
    for (let slot = 0; slot < permits; slot++) {
      if (used?.has(slot)) continue;
      if (!seen?.taken.has(slot)) return slot;
      fallback ??= slot;
    }
    return fallback ?? 0;
  }

  saw(key: string, taken: ReadonlySet<number>, at: number): void {
    this.#seen.delete(key);
    this.#seen.set(key, { taken, at });
    if (this.#seen.size > SEEN_MAX) {
      const oldest = this.#seen.keys().next().value;
      if (oldest !== undefined) this.#seen.delete(oldest);
    }
  }

  add(key: string, slot: number): void {
    let used = this.#used.get(key);
    if (!used) {
      used = new Map();
      this.#used.set(key, used);
    }
    used.set(slot, (used.get(slot) ?? 0) + 1);
  }

  remove(key: string, slot: number): void {
    const used = this.#used.get(key);
    const count = used?.get(slot);
    if (!used || count === undefined) return;
    if (count > 1) used.set(slot, count - 1);
    else used.delete(slot);
    if (used.size === 0) this.#used.delete(key);
  }
}
