import type { Clock } from '@dlock/core';
import { type CallDeadlines, WakeSignal } from '@dlock/core/adapter';
import type { Session } from './zookeeper-session.js';

export interface WaitsDeps {
  readonly clock: Clock;
  /** The service's shared deadline timer: queued claims sleep on it (no timer, no AbortController per wait). */
  readonly deadlines: CallDeadlines;
  /** Aborts when the service closes: a waiting claim then stops waiting (with its reason). */
  readonly closing: AbortSignal;
}

/** A claim inside `wait`: woken early when its session ends or the service closes. */
interface Waiting {
  readonly session: Session;
  readonly notify: () => void;
}

/**
 * Whether what a claim waits for has happened: asked first with `watcher`, which must then be left on the server
 * and wakes the claim when it fires, later without one.
 */
export type WaitOver = (watcher: (() => void) | undefined) => Promise<boolean>;

/**
 * The claims of one driver that wait for their turn. A set rather than listeners on shared signals: cheaper per
 * wait, and no listener-count warnings.
 */
export class Waits {
  readonly #deps: WaitsDeps;
  readonly #waiting = new Set<Waiting>();

  constructor(deps: WaitsDeps) {
    this.#deps = deps;
  }

  /**
   * Waits until `over` says so, the watch it set fires, the session ends (the check that follows answers with the
   * session's end), or `ms` passes. Rejects when `signal` aborts or the service closes.
   */
  async wait(session: Session, ms: number, signal: AbortSignal, over: WaitOver): Promise<undefined> {
    const { clock, closing } = this.#deps;
    if (closing.aborted) throw closing.reason;
    const until = clock.monotonic() + ms;
    const wake = new WakeSignal();
    let woken = false;
    const waiting: Waiting = {
      session,
      notify: () => {
        woken = true;
        wake.notify();
      },
    };
    this.#waiting.add(waiting);
    try {
      if (await over(waiting.notify)) return undefined;
      // A watch lost to a client bug must not strand a waiter until its budget runs out: look again now and then.
      const recheckMs = Math.max(1_000, session.timeoutMs);
      for (;;) {
        if (closing.aborted) throw closing.reason;
        const left = until - clock.monotonic();
        if (left <= 0) return undefined;
        await wake.wait(clock, Math.min(left, recheckMs), signal, this.#deps.deadlines);
        if (closing.aborted) throw closing.reason;
        if (woken || clock.monotonic() >= until) return undefined;
        if (await over(undefined)) return undefined;
      }
    } finally {
      this.#waiting.delete(waiting);
    }
  }

  /** The service is closing: every waiting claim stops waiting (and leaves its queue). */
  stopAll(): void {
    for (const waiting of [...this.#waiting]) waiting.notify();
  }

  /** The session ended: its waiting claims look again, and learn it. */
  sessionEnded(session: Session): void {
    for (const waiting of [...this.#waiting]) if (waiting.session === session) waiting.notify();
  }
}

/**
 * Whether the node just ahead is gone. The watch is set with getData, not exists: on a node that is already gone,
 * exists would leave a watch behind that nothing ever fires.
 */
export async function predecessorGone(
  session: Session,
  predecessor: string,
  watcher: (() => void) | undefined,
): Promise<boolean> {
  return (await (watcher ? session.watchNode(predecessor, watcher) : session.exists(predecessor))) === null;
}
