import { AcquireTimeoutError, LockLostError, type LostReason } from '../errors.js';
import type { Handle } from '../handle.js';
import { MAX_TIMER_MS } from '../options.js';
import type { ElectionHost } from './election-host.js';
import { type Leader, type LeaderFeed, leaderOf } from './leader-feed.js';
import { Leadership } from './leadership.js';
import { resolveCampaignOptions, resolveObserveOptions, resolveRunOptions } from './options.js';

/** Options of `client.election(name, options)`. */
export interface ElectionOptions {
  /** The leader's lease in ms, renewed while it leads (an integer from 10 to 2^31−1). */
  readonly ttlMs: number;
}

/** Options of {@link Election.campaign}; all optional. */
export interface CampaignOptions {
  /** What this candidate proclaims once it leads (at most 1,024 UTF-8 bytes). Default: the client's `ownerId`. */
  readonly value?: string;
  /**
   * How long to wait while another candidate leads, in ms. Default 0: one attempt. `Infinity` waits until elected
   * (or the signal aborts): allowed here, because waiting for leadership is what a standby does.
   */
  readonly waitMs?: number;
  /** Aborting it gives up the campaign; the call rejects with `signal.reason`. */
  readonly signal?: AbortSignal;
  /** Called once if leadership is lost (not when resigned). */
  readonly onLost?: (leadership: Leadership, reason: LostReason) => void;
}

/** Options of {@link Election.observe}. */
export interface ObserveOptions {
  /** Ends the iteration (it returns) when aborted. */
  readonly signal?: AbortSignal;
}

/** Options of {@link Election.runWhileLeader}. */
export interface RunWhileLeaderOptions {
  /** What this candidate proclaims each time it leads (at most 1,024 UTF-8 bytes). Default: the client's `ownerId`. */
  readonly value?: string;
  /** When aborted: resigns if leading and rejects with the signal's reason. */
  readonly signal?: AbortSignal;
}

/**
 * Leader election on the client's lock service, built once here for every backend: a leadership is the election's
 * lock (named like the election), held with the leader's value stored beside the grant. Candidates therefore wait
 * the way lock waiters do on that service — in FIFO order, woken one at a time, where the service queues — and the
 * epoch is the lock's fencing token, which only rises when leadership changes hands.
 */
export class Election {
  /** The election's name, which is also the name of the lock its leader holds. */
  readonly name: string;
  /** The leader's lease in ms. */
  readonly ttlMs: number;
  readonly #host: ElectionHost;
  readonly #feed: () => LeaderFeed;

  /** @internal Made by `LockClient.election`. */
  constructor(name: string, options: ElectionOptions, host: ElectionHost, feed: () => LeaderFeed) {
    this.name = name;
    this.ttlMs = options.ttlMs;
    this.#host = host;
    this.#feed = feed;
  }

  /**
   * Waits to lead (up to `waitMs`), then resolves with the leadership. Rejects with `AcquireTimeoutError` when the
   * budget runs out, the signal's reason when it aborts, `ClientClosedError` after `close()`, and
   * `InvalidArgumentError` for bad input before any I/O.
   */
  async campaign(options?: CampaignOptions): Promise<Leadership> {
    const opts = resolveCampaignOptions(options, this.#host.ownerId);
    this.#host.assertOpen();
    let leadership: Leadership | undefined;
    const userOnLost = opts.onLost;
    // Passes on what the callback returned: the client catches a rejected promise from an `async` one.
    const onLost =
      userOnLost === undefined
        ? undefined
        : (_handle: unknown, reason: LostReason): unknown =>
            leadership
              ? (userOnLost as (l: Leadership, r: LostReason) => unknown)(leadership, reason)
              : undefined;
    for (;;) {
      try {
        const handle = await this.#host.acquire(this.name, {
          ttlMs: this.ttlMs,
          waitMs: opts.waitMs === Number.POSITIVE_INFINITY ? MAX_TIMER_MS : opts.waitMs,
          metadata: opts.value,
          ...(opts.signal === undefined ? {} : { signal: opts.signal }),
          ...(onLost === undefined ? {} : { onLost }),
        });
        leadership = new Leadership(handle as Handle, opts.value, this.#host);
        return leadership;
      } catch (error) {
        // Without a budget, a wait that ran out is only the longest timer Node has: campaign on.
        if (opts.waitMs === Number.POSITIVE_INFINITY && error instanceof AcquireTimeoutError) continue;
        throw error;
      }
    }
  }

  /** The current leader, read from the service, or null while nobody leads. */
  async leader(): Promise<Leader | null> {
    this.#host.assertOpen();
    const { service } = this.#host;
    const inspect = service.inspect as NonNullable<typeof service.inspect>;
    return leaderOf(
      await this.#host.call(() => inspect.call(service, this.name), `leader of "${this.name}"`),
    );
  }

  /**
   * The current leader (or null) first, then every change of leader or value, in order: never an older epoch after
   * a newer one. Ends when the signal aborts; throws `ClientClosedError` when the client closes. Observers in one
   * client share one subscription to the service.
   */
  observe(options?: ObserveOptions): AsyncIterable<Leader | null> {
    const { signal } = resolveObserveOptions(options);
    this.#host.assertOpen();
    const feed = this.#feed;
    return {
      [Symbol.asyncIterator]: () => iterate(feed(), signal),
    };
  }

  /**
   * Campaigns (without a budget), runs `fn` with the leadership, and:
   * - if `fn` settles while still leading, resigns and settles like `fn`;
   * - if leadership is lost, waits for `fn` to settle and campaigns again (also when only the resignation finds the
   *   loss out: a pause past the lease while `fn` ran);
   * - when the signal aborts, resigns if leading and rejects with the signal's reason.
   * `fn` should stop when `leadership.signal` aborts, and pass `leadership.epoch` with every write it makes.
   */
  async runWhileLeader<T>(
    fn: (leadership: Leadership) => Promise<T> | T,
    options?: RunWhileLeaderOptions,
  ): Promise<T> {
    const opts = resolveRunOptions(fn, options, this.#host.ownerId);
    for (;;) {
      const leadership = await this.campaign({
        value: opts.value,
        waitMs: Number.POSITIVE_INFINITY,
        ...(opts.signal === undefined ? {} : { signal: opts.signal }),
      });
      const outcome = await settleOrAbort(() => fn(leadership), opts.signal);
      if (outcome.kind === 'aborted') {
        if (leadership.state === 'leading') await leadership.resign().catch(() => {});
        throw outcome.reason;
      }
      if (leadership.state === 'leading') {
        try {
          await leadership.resign();
        } catch (error) {
          // Lost although nothing had said so yet: the window closed while fn ran (a pause), or the service no
          // longer had the grant. A loss like any other.
          if (!(error instanceof LockLostError)) throw error;
          continue;
        }
        if (outcome.kind === 'rejected') throw outcome.error;
        return outcome.value;
      }
      // Lost while fn ran: whatever fn did, it did without leadership; stand again.
    }
  }
}

type Outcome<T> =
  | { readonly kind: 'fulfilled'; readonly value: T }
  | { readonly kind: 'rejected'; readonly error: unknown }
  | { readonly kind: 'aborted'; readonly reason: unknown };

/** `fn`'s outcome, or the signal's abort if that comes first (`fn` is then left to see its leadership end). */
function settleOrAbort<T>(fn: () => Promise<T> | T, signal: AbortSignal | undefined): Promise<Outcome<T>> {
  const run = Promise.resolve()
    .then(fn)
    .then(
      (value): Outcome<T> => ({ kind: 'fulfilled', value }),
      (error: unknown): Outcome<T> => ({ kind: 'rejected', error }),
    );
  if (signal === undefined) return run;
  if (signal.aborted) return Promise.resolve({ kind: 'aborted', reason: signal.reason });
  return new Promise((resolve) => {
    const onAbort = (): void => resolve({ kind: 'aborted', reason: signal.reason });
    signal.addEventListener('abort', onAbort, { once: true });
    run.then((outcome) => {
      signal.removeEventListener('abort', onAbort);
      resolve(outcome);
    });
  });
}

/** One observer: a queue filled by the shared feed, drained by `for await`. */
function iterate(feed: LeaderFeed, signal: AbortSignal | undefined): AsyncIterator<Leader | null> {
  const queue: (Leader | null)[] = [];
  let ended: Error | undefined;
  /** Every `next()` waiting, not only the last: a caller may ask again before an answer came. */
  const waiting: (() => void)[] = [];
  const wake = (): void => {
    for (const resolve of waiting.splice(0)) resolve();
  };
  let done = false;
  const unsubscribe = feed.subscribe({
    next: (leader) => {
      queue.push(leader);
      wake();
    },
    end: (error) => {
      ended = error;
      wake();
    },
  });
  signal?.addEventListener('abort', wake, { once: true });
  const finish = (): IteratorResult<Leader | null> => {
    if (!done) {
      done = true;
      unsubscribe();
      signal?.removeEventListener('abort', wake);
      // A next() still waiting must end too: no change will come for it any more.
      wake();
    }
    return { done: true, value: undefined };
  };
  return {
    async next(): Promise<IteratorResult<Leader | null>> {
      for (;;) {
        if (done || signal?.aborted) return finish();
        if (queue.length > 0) return { done: false, value: queue.shift() as Leader | null };
        if (ended) {
          const error = ended;
          finish();
          throw error;
        }
        await new Promise<void>((resolve) => {
          waiting.push(resolve);
        });
      }
    },
    async return(): Promise<IteratorResult<Leader | null>> {
      return finish();
    },
  };
}
