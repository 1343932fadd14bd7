import { InvalidArgumentError } from '@dlock/core';

/** The largest token a real gate's BIGINT column holds (2^63 - 1). */
const MAX_TOKEN = 2n ** 63n - 1n;

/** One write a {@link FencedStore} saw, accepted or not. */
export interface FencedWrite<T> {
  /** The resource written. */
  readonly resource: string;
  /** The fencing token the write carried. */
  readonly token: bigint;
  /** The value written (for a rejected write, the value that was refused). */
  readonly value: T;
  /** Order in which the store saw the write (accepted and rejected share one sequence). */
  readonly seq: number;
}

/** What {@link FencedStore.write} answers. */
export type FencedWriteResult =
  | {
      /** The token was at least the mark: the value is stored and the mark is now the token. */
      readonly accepted: true;
    }
  | {
      /** The token was below the mark: nothing changed. */
      readonly accepted: false;
      /** The mark that refused the token; greater than it. */
      readonly highWaterMark: bigint;
    };

/**
 * A resource that enforces fencing the way a real database gate does: a write is accepted only if its token is at
 * least the resource's high-water mark (equal tokens pass, so one holder may write many times), and the mark rises
 * to the token; a write without a valid token is an error. Every accepted and rejected write is recorded for
 * assertions.
 */
export class FencedStore<T = unknown> {
  /** Every accepted write, in order. */
  readonly accepted: FencedWrite<T>[] = [];
  /** Every refused write, in order, with the mark that refused it. */
  readonly rejected: (FencedWrite<T> & {
    /** The mark at the time, greater than the write's token. */
    readonly highWaterMark: bigint;
  })[] = [];
  readonly #marks = new Map<string, bigint>();
  readonly #values = new Map<string, T>();
  #seq = 0;

  /**
   * Stores `value` when `token` is at least the resource's mark (or the resource has none) and raises the mark to
   * `token`; otherwise changes nothing. Records the write either way. Throws `InvalidArgumentError` (field
   * `resource` or `token`), recording nothing, for a resource that is not a non-empty string or a token that is not
   * a `bigint` in `1 … 2^63 − 1`: a real gate refuses those too, and a write that forgot its token must fail a test,
   * not pass it.
   */
  write(resource: string, token: bigint, value: T): FencedWriteResult {
    if (typeof resource !== 'string' || resource.length === 0) {
      throw new InvalidArgumentError('resource', 'must be a non-empty string');
    }
    if (typeof token !== 'bigint' || token < 1n || token > MAX_TOKEN) {
      throw new InvalidArgumentError('token', 'must be a bigint fencing token from 1 to 2^63 - 1');
    }
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

  /** The last accepted value of `resource`, or `undefined` if none was accepted. */
  read(resource: string): T | undefined {
    return this.#values.get(resource);
  }

  /** The highest token accepted for `resource`, or `undefined` if none was. */
  highWaterMark(resource: string): bigint | undefined {
    return this.#marks.get(resource);
  }
}
