import type { Clock } from '@dlock/core';
import type { BackgroundRetries } from '@dlock/core/adapter';
import { isNodeOfAttempt } from './keys.js';
import type { Leftovers, NodeCheck } from './leftovers.js';
import { childrenOf, nodesAt, removeNode } from './node-ops.js';
import type { Session, SessionNodes } from './zookeeper-session.js';

export interface NodeCleanupDeps {
  readonly clock: Clock;
  readonly cleanups: BackgroundRetries;
  readonly leftovers: Leftovers;
}

/**
 * How long a failing delete is retried while its session lives. A node of a live session blocks its lock until it
 * is deleted, but a server that keeps refusing (an ACL) must not be asked forever; a silent server ends the session
 * first (pending nodes keep its silence watched), and then the nodes are handed on.
 */
const CLEANUP_MS = 30_000;

/**
 * Deleting the nodes an attempt or a grant leaves behind (Curator's "guaranteed delete"), for both drivers: while
 * their session lives the session tracks them, so that its end hands them to the leftovers instead of forgetting
 * them; NoNode counts as done.
 */
export class NodeCleanup {
  readonly #deps: NodeCleanupDeps;
  /**
   * The hand-overs of {@link retry}'s deletes not yet done, per session: its end runs them at once, since
   * `close()` ends the session and then stops the retries, which would otherwise never hand the node on.
   */
  readonly #retrying = new Map<Session, Set<() => void>>();

  constructor(deps: NodeCleanupDeps) {
    this.#deps = deps;
  }

  /**
   * Deletes nodes of a session, once: the known node, every node of the attempt id when a create's outcome was never
   * seen, then whatever `also` deletes. A failure is thrown for the caller's retries (core's, or {@link removeLater}'s)
   * until `CLEANUP_MS` after the first one; the nodes stay tracked by their session until then.
   */
  async remove(session: Session, nodes: SessionNodes, also?: () => Promise<void>): Promise<void> {
    if (session.ended) {
      this.handOver(session, nodes);
      return;
    }
    session.hold(nodes);
    try {
      if (nodes.node !== undefined) await removeNode(session, `${nodes.parent}/${nodes.node}`);
      if (nodes.uncertain && nodes.attemptId !== undefined) {
        const attemptId = nodes.attemptId;
        const mine = ((await childrenOf(session, nodes.parent)) ?? []).filter((child) =>
          isNodeOfAttempt(child, attemptId),
        );
        await Promise.all(mine.map((child) => removeNode(session, `${nodes.parent}/${child}`)));
      }
      if (also) await also();
    } catch (error) {
      if (session.ended) {
        this.handOver(session, nodes);
        return;
      }
      const now = this.#deps.clock.monotonic();
      nodes.giveUpAt ??= now + CLEANUP_MS;
      if (now < nodes.giveUpAt) throw error;
    }
    session.letGo(nodes);
  }

  /** {@link remove} in the background, retried while the session lives. */
  removeLater(session: Session, nodes: SessionNodes): void {
    this.#deps.cleanups.run(() => this.remove(session, nodes), Number.POSITIVE_INFINITY);
  }

  /**
   * One delete of the caller's (a check comes first) retried in the background for `CLEANUP_MS`, while the session
   * lives; once it has ended, `handOver` (if given) passes the node on instead.
   */
  retry(session: Session, remove: () => Promise<void>, handOver?: () => void): void {
    const { clock } = this.#deps;
    const giveUpAt = clock.monotonic() + CLEANUP_MS;
    // A function of this call's own, so that the same hand-over passed twice stays two entries. Run twice (by the
    // session's end, then by the task), it only names the same node again.
    const entry = handOver && !session.ended ? () => handOver() : undefined;
    if (entry) this.#track(session, entry);
    this.#deps.cleanups.run(async () => {
      if (!session.ended) {
        try {
          await remove();
          this.#untrack(session, entry);
          return;
        } catch (error) {
          if (!session.ended && clock.monotonic() < giveUpAt) throw error;
        }
      }
      this.#untrack(session, entry);
      if (session.ended) handOver?.();
    }, Number.POSITIVE_INFINITY);
  }

  #track(session: Session, handOver: () => void): void {
    let retrying = this.#retrying.get(session);
    if (!retrying) {
      retrying = new Set();
      this.#retrying.set(session, retrying);
    }
    retrying.add(handOver);
  }

  #untrack(session: Session, handOver: (() => void) | undefined): void {
    if (!handOver) return;
    const retrying = this.#retrying.get(session);
    if (!retrying?.delete(handOver)) return;
    if (retrying.size === 0) this.#retrying.delete(session);
  }

  /** A retried create can leave two nodes of one attempt (a lagging server did not show the first): drop extras. */
  dropDuplicates(session: Session, nodes: SessionNodes, queue: readonly string[]): void {
    const { attemptId } = nodes;
    if (attemptId === undefined) return;
    for (const child of queue) {
      if (child !== nodes.node && isNodeOfAttempt(child, attemptId)) {
        this.removeLater(session, nodesAt(nodes.parent, child));
      }
    }
  }

  /** The nodes of a session that ended go with it, unless a caller's client keeps it: then they are leftovers. */
  handOver(session: Session, nodes: SessionNodes): void {
    session.letGo(nodes);
    if (session.owned) return;
    const path = nodes.node === undefined ? undefined : `${nodes.parent}/${nodes.node}`;
    const attemptId = nodes.uncertain ? nodes.attemptId : undefined;
    if (path !== undefined || attemptId !== undefined) {
      this.#deps.leftovers.add(session, nodes.parent, path, attemptId);
    }
  }

  /**
   * A node of a session that ended, to be deleted with the leftovers only if a read of it passes `check` (its name
   * is not unique to this session's attempt). Nothing to do when the session went with its client.
   */
  handOverChecked(session: Session, path: string, check: NodeCheck): void {
    if (!session.owned) this.#deps.leftovers.addChecked(session, path, check);
  }

  /**
   * Every pending node of an ended session (queue nodes of locks and semaphores alike) is handed over, and so is
   * every node whose {@link retry} is not done.
   */
  handOverAll(session: Session): void {
    for (const nodes of [...session.pending]) this.handOver(session, nodes);
    const retrying = this.#retrying.get(session);
    this.#retrying.delete(session);
    for (const handOver of retrying ?? []) handOver();
  }
}
