export interface FencedWrite<T> {
  readonly resource: string;
  readonly token: bigint;
  readonly value: T;
  /** Order in which the store saw the write (accepted and rejected share one sequence). */
  readonly seq: number;
}

export type FencedWriteResult =
  | { readonly accepted: true }
  | { readonly accepted: false; readonly highWaterMark: bigint };

/**
 * A resource that enforces fencing the way a real database gate does: a write is accepted only if its token is at
 * least the resource's high-water mark (equal tokens pass, so one holder may write many times), and the mark rises
 * to the token. Every accepted and rejected write is recorded for assertions.
 */
export class FencedStore<T = unknown> {
  readonly accepted: FencedWrite<T>[] = [];
  readonly rejected: (FencedWrite<T> & { readonly highWaterMark: bigint })[] = [];
  readonly #marks = new Map<string, bigint>();
  readonly #values = new Map<string, T>();
  #seq = 0;

  write(resource: string, token: bigint, value: T): FencedWriteResult {
    const seq = this.#seq++;
    const mark = this.#marks.get(resource);
    if (mark !== undefined && token < mark) {
      this.rejected.push({ resource, token, value, seq, highWaterMark: mark });
      return { accepted: false, highWaterMark: mark };
    }
    this.#marks.set(resource, token);
    this.#values.set(resource, value);
    this.accepted.push({ resource, token, value, seq });
    return { accepted: true };
  }

  read(resource: string): T | undefined {
    return this.#values.get(resource);
  }

  highWaterMark(resource: string): bigint | undefined {
    return this.#marks.get(resource);
  }
}
