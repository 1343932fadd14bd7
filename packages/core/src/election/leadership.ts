import { LockLostError, LockReleasedError } from '../errors.js';
import type { Handle } from '../handle.js';
import { validateMetadata } from '../options.js';
import type { ElectionHost } from './election-host.js';

/** A leadership's lifecycle: `leading` until resigned or lost; `lost` and `resigned` are final. */
export type LeadershipState = 'leading' | 'lost' | 'resigned';

/**
 * This process leads an election: a lock handle whose grant carries the leader's value. Like a lock handle it is a
 * belief, not a guarantee — a paused leader can wake after its lease ran out and a successor took over. `epoch` is a
 * fencing token for the election's name: pass it with every write the leader makes and let the resource refuse
 * stale epochs (`@dlock/fencing-pg`, `@dlock/fencing-kysely`).
 */
export class Leadership implements AsyncDisposable {
  /** The election's name. */
  readonly name: string;
  readonly #handle: Handle;
  readonly #host: ElectionHost;
  #value: string;

  /** @internal Made by `Election.campaign`. */
  constructor(handle: Handle, value: string, host: ElectionHost) {
    this.name = handle.name;
    this.#handle = handle;
    this.#value = value;
    this.#host = host;
  }

  /** Strictly increasing across successive leaders of this election; unchanged by renewals and `proclaim`. */
  get epoch(): bigint {
    return this.#handle.fencingToken;
  }

  /** What this leader proclaimed last. */
  get value(): string {
    return this.#value;
  }

  /** `leading` until resigned or lost; `lost` and `resigned` are final. */
  get state(): LeadershipState {
    const state = this.#handle.state;
    return state === 'held' ? 'leading' : state === 'lost' ? 'lost' : 'resigned';
  }

  /** Aborts when the leadership ends, with a `LockLostError` (lost) or a `LockReleasedError` (resigned). */
  get signal(): AbortSignal {
    return this.#handle.signal;
  }

  /** Advisory, like `LockHandle.isHeld()`: leading and the validity window not passed by the local clock. */
  isLeader(): boolean {
    return this.#handle.isHeld();
  }

  /**
   * Changes the value the service reports for this leader, keeping the epoch. Rejects with the leadership's
   * `LockLostError` when it no longer leads: the service said so (`rejected`), or the validity window closed before
   * the call (`expired`, and nothing is sent) or before its answer came (`expired`, although the service may show the
   * value). The leadership is then `lost`. Rejects with a `LockReleasedError` after `resign()`, with a
   * `TransportError` when the service could not be told.
   */
  async proclaim(value: string): Promise<void> {
    const next = validateMetadata(value, 'value');
    this.#host.assertOpen();
    this.#assertWindowOpen();
    const { service } = this.#host;
    const lease = this.#handle.lease;
    // An election exists only on a service with updateMetadata (checked when it was made).
    const ok = await this.#host.call(
      () => (service.updateMetadata as NonNullable<typeof service.updateMetadata>).call(service, lease, next),
      `proclaim on "${this.name}"`,
    );
    if (ok) {
      this.#value = next;
      // Written while the service still had the grant, but answered after the window closed (a pause, a slow
      // reply): for the time in between this client vouched for nothing, and a late yes cannot say it led.
      this.#assertWindowOpen();
      return;
    }
    // The service no longer has our grant (an owner-checked write refused): that is a loss, as a refused renewal is.
    this.#host.lose(this.#handle, 'rejected');
    this.#assertLeading();
    throw new LockLostError(this.name, this.epoch, 'rejected');
  }

  /**
   * Steps down: the lock is released, so the next candidate in line takes over at once, not after a TTL. Rejects
   * like `LockHandle.release()`: with the `LockLostError` when leadership did not last until this call.
   */
  resign(): Promise<void> {
    return this.#handle.release();
  }

  /**
   * Resigns at scope exit (`await using`). Throws the `LockLostError` when leadership was lost before the scope
   * ended; a resignation the service did not hear of is only reported as a `callback-error` event.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.#handle[Symbol.asyncDispose]();
  }

  /** Leading, and the window still open: a window that closed (a pause past the lease) is a loss, `expired`. */
  #assertWindowOpen(): void {
    if (this.#handle.state === 'held' && !this.#handle.isHeld()) this.#host.lose(this.#handle, 'expired');
    this.#assertLeading();
  }

  #assertLeading(): void {
    const state = this.#handle.state;
    if (state === 'lost')
      throw this.#handle.lostError ?? new LockLostError(this.name, this.epoch, 'rejected');
    if (state === 'released') throw new LockReleasedError(this.name, this.epoch);
  }
}
