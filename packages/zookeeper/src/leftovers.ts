import { ZK_ERROR, zkErrorCode } from './errors.js';
import { isNodeOfAttempt } from './keys.js';
import type { NodeRead, Session } from './zookeeper-session.js';

/** Whether a node read under the session is the one to delete (for a name another attempt may use too). */
export type NodeCheck = (read: NodeRead) => boolean;

/**
 * The nodes a session may still have on the server: exact paths, attempts whose node name is unknown, and nodes
 * deleted only after a read passes their check.
 */
interface Nodes {
  readonly paths: Set<string>;
  /** attempt id → parent */
  readonly attempts: Map<string, string>;
  /** path → check */
  readonly checked: Map<string, NodeCheck>;
  /** Something was added since the last sweep began. */
  dirty: boolean;
}

export interface LeftoversDeps {
  /** A session object to send deletes with, while the client passed in is connected under that id. */
  readonly sweeperFor: (sessionId: string) => Session | undefined;
}

/**
 * The nodes of sessions this service gave up on while the client passed in lives on: its grants, its queue nodes,
 * its pending cleanups. The adapter declares a session over slightly before the server would, and a connection
 * that comes back under the same session id finds its ephemeral nodes still there, blocking other processes for as
 * long as the caller's client lives. They are deleted as soon as the client is connected under that session again
 * (at once, if it never stopped being), and forgotten once it has another session or none (then the server
 * deleted them). That goes on after the service closed: a caller's client that was disconnected then may come back
 * under the session later. A client this adapter made needs none of this: it is closed with its session.
 */
export class Leftovers {
  readonly #deps: LeftoversDeps;
  readonly #bySession = new Map<string, Nodes>();
  readonly #sweeping = new Map<string, Promise<void>>();
  #closed = false;
  /** Set by `close()`: called once nothing is left to delete or sweeping. */
  #whenDone: (() => void) | undefined;

  constructor(deps: LeftoversDeps) {
    this.#deps = deps;
  }

  /** Remembers `path`, or else every node of `attemptId` under `parent`, and deletes it if it can now. */
  add(session: Session, parent: string, path: string | undefined, attemptId: string | undefined): void {
    const nodes = this.#nodesOf(session);
    if (!nodes) return;
    if (path !== undefined) nodes.paths.add(path);
    if (attemptId !== undefined) nodes.attempts.set(attemptId, parent);
    this.#due(session, nodes);
  }

  /**
   * Remembers `path`, deleted only if a read of it passes `check`: a node whose name another attempt (or session)
   * may have taken since, such as a semaphore's slot. Checks of one path add up: two claims of the session may each
   * have left the same slot unsure, and the node, whichever of them made it, is to go.
   */
  addChecked(session: Session, path: string, check: NodeCheck): void {
    const nodes = this.#nodesOf(session);
    if (!nodes) return;
    const earlier = nodes.checked.get(path);
    nodes.checked.set(path, earlier === undefined ? check : (read) => earlier(read) || check(read));
    this.#due(session, nodes);
  }

  #nodesOf(session: Session): Nodes | undefined {
    // Nothing new after close(): it ended the session first, and that end handed over every node the session
    // tracks (an attempt's from its first request on), so a later hand-over (a delete that was in flight) names one
    // of them again, or one already deleted.
    if (this.#closed) return undefined;
    let nodes = this.#bySession.get(session.id);
    if (!nodes) {
      nodes = { paths: new Set(), attempts: new Map(), checked: new Map(), dirty: false };
      this.#bySession.set(session.id, nodes);
    }
    return nodes;
  }

  #due(session: Session, nodes: Nodes): void {
    if (nodes.dirty) return; // a sweep is due already
    nodes.dirty = true;
    // Deferred, so that the many nodes of one ending session go out in one sweep. A sweep under way sees `dirty`.
    if (!this.#sweeping.has(session.id)) queueMicrotask(() => void this.sweep(session.id));
  }

  /** The caller's client is connected under `sessionId`, or (undefined) has no session any more. */
  connected(sessionId: string | undefined): void {
    for (const id of [...this.#bySession.keys()]) {
      // The client holds one session at a time: any other one is over, and the server deleted its nodes.
      if (id !== sessionId) this.#bySession.delete(id);
    }
    if (sessionId !== undefined) void this.sweep(sessionId);
    else this.#checkDone();
  }

  /** Deletes what it can of one session's nodes now; what fails waits for the next reconnect. */
  sweep(sessionId: string): Promise<void> {
    const running = this.#sweeping.get(sessionId);
    if (running) return running;
    const run = (async () => {
      while (await this.#sweepOnce(sessionId)) {
        // more was added while it ran
      }
    })().finally(() => {
      this.#sweeping.delete(sessionId);
      // Added between the last pass and now, with no sweep scheduled for it.
      if (this.#bySession.get(sessionId)?.dirty) void this.sweep(sessionId);
      else this.#checkDone();
    });
    this.#sweeping.set(sessionId, run);
    return run;
  }

  /** Sweeps every session that can be swept now; used by `close()`. */
  async sweepAll(): Promise<void> {
    await Promise.allSettled([...this.#bySession.keys()].map((id) => this.sweep(id)));
  }

  /**
   * After the service closed: nothing more is taken on, but what is left is still deleted on the client's next
   * connect under its session (or forgotten, see {@link connected}), so that a caller's client that reconnects
   * later does not keep a grant nobody holds. `done` is called once nothing is left (at once if nothing is): the
   * client's state need not be followed any more.
   */
  close(done: () => void): void {
    this.#closed = true;
    this.#whenDone = done;
    this.#checkDone();
  }

  #checkDone(): void {
    const done = this.#whenDone;
    if (!done || this.#bySession.size > 0 || this.#sweeping.size > 0) return;
    this.#whenDone = undefined;
    done();
  }

  /** One pass over what is known now; true if more was added meanwhile and the client is still there for it. */
  async #sweepOnce(sessionId: string): Promise<boolean> {
    const nodes = this.#bySession.get(sessionId);
    if (!nodes) return false;
    nodes.dirty = false;
    const sweeper = this.#deps.sweeperFor(sessionId);
    if (!sweeper) return false;
    const removals = [...nodes.paths].map(async (path) => {
      if (await removed(sweeper, path)) nodes.paths.delete(path);
    });
    const scans = [...nodes.attempts].map(async ([attemptId, parent]) => {
      let children: string[];
      try {
        children = await sweeper.getChildren(parent);
      } catch (error) {
        if (zkErrorCode(error) === ZK_ERROR.NO_NODE) nodes.attempts.delete(attemptId);
        return;
      }
      const mine = children.filter((child) => isNodeOfAttempt(child, attemptId));
      const done = await Promise.all(mine.map((child) => removed(sweeper, `${parent}/${child}`)));
      if (done.every(Boolean)) nodes.attempts.delete(attemptId);
    });
    const checks = [...nodes.checked].map(async ([path, check]) => {
      if (await removedIf(sweeper, path, check)) nodes.checked.delete(path);
    });
    await Promise.all([...removals, ...scans, ...checks]);
    if (this.#bySession.get(sessionId) !== nodes) return false;
    if (nodes.paths.size === 0 && nodes.attempts.size === 0 && nodes.checked.size === 0) {
      this.#bySession.delete(sessionId);
      return false;
    }
    return nodes.dirty;
  }
}

/** Deletes a node; true if it is gone now (deleted, or already gone), false if the outcome is unknown. */
async function removed(session: Session, path: string): Promise<boolean> {
  try {
    await session.remove(path);
    return true;
  } catch (error) {
    return zkErrorCode(error) === ZK_ERROR.NO_NODE;
  }
}

/** Deletes a node if a read of it passes `check`; true if it is not there to delete now, false if unknown. */
async function removedIf(session: Session, path: string, check: NodeCheck): Promise<boolean> {
  let read: NodeRead | null;
  try {
    read = await session.readNode(path);
  } catch {
    return false;
  }
  return read === null || !check(read) || removed(session, path);
}
