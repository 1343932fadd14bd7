/** A member's place in one {@link LinkedSet}: made once with the member, reused by every add. */
export class Link<T> {
  /** @internal The member before this one in its set. */
  prev: Link<T> | undefined = undefined;
  /** @internal The member after this one in its set. */
  next: Link<T> | undefined = undefined;
  /** The set the member is in, while it is in one. */
  owner: LinkedSet<T> | undefined = undefined;

  /** @param value the member this link places. */
  constructor(
    /** The member this link places. */
    readonly value: T,
  ) {}
}

/**
 * A set kept as a doubly linked list through links its members own, in insertion order. Adding and
 * deleting allocate nothing: a `Set` makes its table again each time it empties and fills, which a client holding
 * one lock at a time does on every acquire and release.
 */
export class LinkedSet<T> {
  readonly #linkOf: (value: T) => Link<T>;
  #head: Link<T> | undefined = undefined;
  #tail: Link<T> | undefined = undefined;
  #size = 0;

  constructor(linkOf: (value: T) => Link<T>) {
    this.#linkOf = linkOf;
  }

  /** How many members the set has. */
  get size(): number {
    return this.#size;
  }

  /** Appends `value` unless it is in this set already (a value is in at most one set per link). */
  add(value: T): void {
    const link = this.#linkOf(value);
    if (link.owner === this) return;
    link.owner = this;
    link.prev = this.#tail;
    link.next = undefined;
    if (this.#tail) this.#tail.next = link;
    else this.#head = link;
    this.#tail = link;
    this.#size += 1;
  }

  /** Removes `value`; false if it was not in this set. */
  delete(value: T): boolean {
    const link = this.#linkOf(value);
    if (link.owner !== this) return false;
    link.owner = undefined;
    if (link.prev) link.prev.next = link.next;
    else this.#head = link.next;
    if (link.next) link.next.prev = link.prev;
    else this.#tail = link.prev;
    link.prev = undefined;
    link.next = undefined;
    this.#size -= 1;
    return true;
  }

  /** The members, oldest first, as an array: safe to change the set while going through it. */
  values(): T[] {
    const values: T[] = [];
    for (let link = this.#head; link !== undefined; link = link.next) values.push(link.value);
    return values;
  }

  /** Goes through the members, oldest first; the set must not change meanwhile (use {@link values} then). */
  forEach(visit: (value: T) => void): void {
    for (let link = this.#head; link !== undefined; link = link.next) visit(link.value);
  }

  /** The first member `test` accepts, oldest first. */
  find(test: (value: T) => boolean): T | undefined {
    for (let link = this.#head; link !== undefined; link = link.next) if (test(link.value)) return link.value;
    return undefined;
  }
}
