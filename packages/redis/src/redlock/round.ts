import { setMaxListeners } from 'node:events';
import { type Clock, TransportError } from '@dlock/core';

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

interface Deadline {
  readonly at: number;
  readonly expire: () => void;
  done: boolean;
}

/**
 * The deadlines of every round of one service, on one timer. Every round gets the same timeout, so deadlines arrive
 * in order and the earliest live one is always at the head: adding and finishing are O(1) (a finished round is
 * skipped when the timer reaches it), and the timer is armed at most once per timeout while rounds keep coming —
 * instead of a `setTimeout`/`clearTimeout` pair per round (about 15 µs each here). The timer is unref'd: it bounds
 * calls, it does not keep the process alive.
 */
export class RoundDeadlines {
  readonly timeoutMs: number;
  readonly clock: Clock;
  #queue: Deadline[] = [];
  #head = 0;
  #armed: AbortController | undefined;

  constructor(clock: Clock, timeoutMs: number) {
    this.clock = clock;
    this.timeoutMs = timeoutMs;
  }

  add(expire: () => void): Deadline {
    const entry: Deadline = { at: this.clock.monotonic() + this.timeoutMs, expire, done: false };
    this.#queue.push(entry);
    if (!this.#armed) this.#arm(entry.at);
    return entry;
  }

  #arm(at: number): void {
    const timer = new AbortController();
    this.#armed = timer;
    this.clock.sleep(Math.max(0, at - this.clock.monotonic()), timer.signal, { unref: true }).then(
      () => this.#fire(),
      () => {},
    );
  }

  #fire(): void {
    this.#armed = undefined;
    const now = this.clock.monotonic();
    for (;;) {
      const entry = this.#queue[this.#head];
      if (!entry || (!entry.done && entry.at > now)) break;
      this.#head += 1;
      if (!entry.done) {
        entry.done = true;
        entry.expire();
      }
    }
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    const next = this.#queue[this.#head];
    if (next) this.#arm(next.at);
    else {
      this.#queue = [];
      this.#head = 0;
    }
  }
}

export interface RoundOptions<T> {
  /** The round ends at its deadline whatever is still pending: a dead or paused node cannot hold it up. */
  readonly deadlines: RoundDeadlines;
  /** Ends the round early once more answers cannot change the caller's decision. */
  readonly decided?: (outcomes: readonly Outcome<T>[]) => boolean;
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
    const finish = (reason: TransportError): void => {
      if (finished) return;
      finished = true;
      deadline.done = true;
      // Calls still running belong to a round that is over: nothing they start from now on may land late.
      if (open > 0) calls.abort(reason);
      resolve(outcomes.slice());
    };
    const deadline = options.deadlines.add(() =>
      finish(new TransportError(`no answer within ${options.deadlines.timeoutMs} ms`)),
    );
    const settle = (index: number, outcome: Outcome<T>): void => {
      if (finished) return;
      outcomes[index] = outcome;
      open -= 1;
      if (open === 0 || options.decided?.(outcomes)) finish(ROUND_OVER);
    };
    if (count === 0) {
      finish(ROUND_OVER);
      return;
    }
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
