import { setMaxListeners } from 'node:events';
import { type Clock, TransportError } from '@dlock/core';
import { CallDeadlines } from '@dlock/core/adapter';

/** What one node did in a round. */
export type Outcome<T> =
  | { readonly status: 'ok'; readonly value: T }
  /** The call failed. It may still have been applied (a lost reply), so it never counts as a refusal. */
  | { readonly status: 'failed'; readonly error: unknown }
  /** No answer when the round ended, by deadline or because the result was already decided. */
  | { readonly status: 'pending' };

const PENDING: Outcome<never> = { status: 'pending' };
/** One shared reason: a round ending early is routine, not worth a stack trace each time. */
const ROUND_OVER = new TransportError('the round ended before this node answered');

/**
 * The deadlines of every round of one service: core's one-timer {@link CallDeadlines} with the service's fixed round
 * timeout, instead of a `setTimeout`/`clearTimeout` pair per round (about 15 µs each here). Unref'd: it bounds
 * calls, it does not keep the process alive.
 */
export class RoundDeadlines {
  readonly timeoutMs: number;
  readonly clock: Clock;
  readonly #deadlines: CallDeadlines;

  constructor(clock: Clock, timeoutMs: number) {
    this.clock = clock;
    this.timeoutMs = timeoutMs;
    this.#deadlines = new CallDeadlines(clock);
  }

  /** Calls `expire` one timeout from now unless the returned cancel function runs first. */
  add(expire: () => void): () => void {
    const entry = this.#deadlines.add(this.clock.monotonic() + this.timeoutMs, expire);
    return () => this.#deadlines.delete(entry);
  }
}

export interface RoundOptions<T> {
  /** The round ends at its deadline whatever is still pending: a dead or paused node cannot hold it up. */
  readonly deadlines: RoundDeadlines;
  /** Ends the round early once more answers cannot change the caller's decision. */
  readonly decided?: (outcomes: readonly Outcome<T>[]) => boolean;
  /** Ends the round when it aborts: the caller gave up, so what is still pending no longer matters. */
  readonly signal?: AbortSignal | undefined;
}

/**
 * Calls every node at once and collects what each did, within one deadline for the whole round. When the round
 * ends, by deadline or decision, the calls' signal is aborted: the driver drops a command it has not written yet,
 * and a call must not send anything new. A command already written cannot be recalled; its reply is just ignored.
 */
export function runRound<T>(
  count: number,
  call: (index: number, signal: AbortSignal) => Promise<T>,
  options: RoundOptions<T>,
): Promise<Outcome<T>[]> {
  return new Promise((resolve) => {
    const outcomes: Outcome<T>[] = new Array<Outcome<T>>(count).fill(PENDING);
    const calls = new AbortController();
    // Every node's command listens on it (twice after a NOSCRIPT retry): more than Node's default 10 is normal.
    if (count > 4) setMaxListeners(0, calls.signal);
    let open = count;
    let finished = false;
    const external = options.signal;
    const onAbort = (): void => finish(ROUND_OVER);
    const finish = (reason: TransportError): void => {
      if (finished) return;
      finished = true;
      cancelDeadline();
      external?.removeEventListener('abort', onAbort);
      // Calls still running belong to a round that is over: nothing they start from now on may land late.
      if (open > 0) calls.abort(reason);
      resolve(outcomes.slice());
    };
    const cancelDeadline = options.deadlines.add(() =>
      finish(new TransportError(`no answer within ${options.deadlines.timeoutMs} ms`)),
    );
    const settle = (index: number, outcome: Outcome<T>): void => {
      if (finished) return;
      outcomes[index] = outcome;
      open -= 1;
      if (open === 0 || options.decided?.(outcomes)) finish(ROUND_OVER);
    };
    if (count === 0 || external?.aborted) {
      finish(ROUND_OVER);
      return;
    }
    external?.addEventListener('abort', onAbort, { once: true });
    for (let i = 0; i < count; i++) {
      let pending: Promise<T>;
      try {
        pending = call(i, calls.signal);
      } catch (error) {
        pending = Promise.reject(error);
      }
      pending.then(
        (value) => settle(i, { status: 'ok', value }),
        (error: unknown) => settle(i, { status: 'failed', error }),
      );
    }
  });
}
