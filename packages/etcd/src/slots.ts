/**
 * Which key slots of each lock name this service's contenders are using. A contender takes the lowest free slot,
 * so a name's keys are reused across acquisitions (see keys.ts for why that matters to etcd). A name with no slot
 * in use is forgotten, so memory follows the locks in use, not every name ever locked.
 */
export class Slots {
  readonly #used = new Map<string, Set<number>>();

  take(name: string): number {
    let used = this.#used.get(name);
    if (!used) {
      used = new Set();
      this.#used.set(name, used);
    }
    let slot = 0;
    while (used.has(slot)) slot++;
    used.add(slot);
    return slot;
  }

  free(name: string, slot: number): void {
    const used = this.#used.get(name);
    if (!used) return;
    used.delete(slot);
    if (used.size === 0) this.#used.delete(name);
  }

  /** Number of slots in use for `name` (for tests). */
  inUse(name: string): number {
    return this.#used.get(name)?.size ?? 0;
  }
}
