import { randomBytes } from 'node:crypto';
import { type AcquireRequest, TransportError } from '@dlock/core';
import { CREATE_MODE } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import type { GrantRecord, Grants } from './grants.js';
import { attemptPrefix, isNodeOfAttempt, queueOrder } from './keys.js';
import type { Leftovers } from './leftovers.js';
import type { NodeCleanup } from './node-cleanup.js';
import { childrenOf, nodesAt } from './node-ops.js';
import type { WaitsDeps } from './waits.js';
import { isConnectionLoss, type Session, type SessionNodes } from './zookeeper-session.js';
import type { Sessions } from './zookeeper-sessions.js';

/**
 * Protected mode, for both drivers (ZOOKEEPER-1262, Curator's): every acquire attempt has an id, carried in the name
 * of each queue node it creates, so that a create retried after a connection loss finds the node it may have made
 * instead of leaving an orphan in the queue.
 */

/** What each driver is built from. */
export interface DriverDeps extends WaitsDeps {
  /** The node under which every lock's parent (and the semaphores' node) lives. */
  readonly root: string;
  readonly sessions: Sessions;
  readonly leftovers: Leftovers;
  readonly cleanup: NodeCleanup;
  /** Grants the driver knows are gone (reaped, or their session ended). */
  readonly lost: (ownershipTokens: readonly string[]) => void;
}

/** One attempt's queue node, named with its id, in the session it is created in. */
export interface Attempt extends SessionNodes {
  readonly request: AcquireRequest;
  /** When the acquire call began (monotonic ms), also for a claim made after a restart: `queuedMs` counts from it. */
  readonly startedAt: number;
  /** 32 hex digits, part of the node name. */
  readonly attemptId: string;
  /** The session the node is created in; unset until `enqueue` has one. */
  session: Session | undefined;
}

/** Attempt ids are this random prefix and a counter: unique across processes, and cheaper than 16 random bytes. */
export class AttemptIds {
  readonly #prefix = randomBytes(10).toString('hex');
  #count = 0;

  next(): string {
    this.#count += 1;
    return this.#prefix + this.#count.toString(16).padStart(12, '0');
  }
}

/**
 * The live session for an attempt. Grants of it nobody renewed for a session timeout (this process was paused) go
 * first, as a TTL would end them.
 */
export async function sessionFor<R extends GrantRecord>(
  attempt: Attempt,
  sessions: Sessions,
  grants: Grants<R>,
): Promise<Session> {
  const session = sessions.current ?? (await sessions.live(attempt.request.signal));
  if (grants.has(session)) await grants.reapOverdue(session);
  attempt.session = session;
  return session;
}

export interface QueueEntry {
  /** The parent's children, listed right after the create (a promise unless `recoverListing`). */
  readonly children: string[] | Promise<string[]>;
  /** The create's reply zxid; undefined when the node was found by its attempt id. */
  readonly zxid: bigint | undefined;
}

export interface QueueEntryOptions {
  readonly cleanup: NodeCleanup;
  /** NoNode on the create: true once the parent is made (create again), false to give up (resolves undefined). */
  readonly noParent: (error: unknown, round: number) => Promise<boolean>;
  /**
   * Whether a listing lost with the connection after the create succeeded is answered as a lost create reply is
   * (the semaphore) or fails the call (the lock recipe, whose enqueue core then leaves and retries).
   */
  readonly recoverListing: boolean;
}

const noop = (): void => {};

/**
 * Creates the attempt's ephemeral sequential node and lists the parent's children in the same breath (pipelined:
 * ZooKeeper answers a session's requests in order, so the list includes the new node), which saves a round trip. A
 * connection lost with the reply is answered by looking for the node by the attempt id (up to 4 rounds); a create
 * that went out unanswered makes the attempt uncertain, so that leaving it deletes every node of its id.
 */
export async function createQueueNode(
  session: Session,
  attempt: Attempt,
  data: Buffer,
  options: QueueEntryOptions,
): Promise<QueueEntry | undefined> {
  const { parent, attemptId } = attempt;
  for (let round = 0; ; round++) {
    const created = session.create(
      attemptPrefix(parent, attemptId),
      data,
      CREATE_MODE.EPHEMERAL_SEQUENTIAL,
      (late) =>
        // Created after the deadline gave up on it: an orphan, unless deleted.
        options.cleanup.removeLater(session, nodesAt(parent, late.path.slice(parent.length + 1))),
    );
    const listed = session.getChildren(parent);
    listed.catch(noop);
    try {
      const { path, zxid } = await created;
      attempt.node = path.slice(parent.length + 1);
      return { zxid, children: options.recoverListing ? await listed : listed };
    } catch (error) {
      if (zkErrorCode(error) === ZK_ERROR.NO_NODE) {
        if (await options.noParent(error, round)) continue;
        return undefined;
      }
      if (error instanceof TransportError) attempt.uncertain = true;
      if (!isConnectionLoss(error) || round >= 4) throw error;
      // The create may have happened before the connection dropped: look for the node by the attempt id.
      const children = (await childrenOf(session, parent)) ?? [];
      const found = children.find((child) => isNodeOfAttempt(child, attemptId));
      if (found !== undefined) {
        attempt.node = found;
        return { zxid: undefined, children };
      }
    }
  }
}

const GONE = Object.freeze({ kind: 'gone' as const });

/** Where a node stands in its queue: `head`, behind its predecessor (the node to wait for), or gone. */
export type QueuePlace =
  | typeof GONE
  | { readonly kind: 'behind'; readonly wait: { readonly predecessor: string } }
  | 'head';

/**
 * The attempt's place among the parent's children. Gone when its node is not there (with the session's end, if
 * that is why); an uncertain attempt's extra nodes are deleted on the way.
 */
export function queuePlace(
  attempt: Attempt,
  session: Session,
  children: readonly string[],
  cleanup: NodeCleanup,
): QueuePlace {
  const queue = queueOrder(children);
  const index = queue.indexOf(attempt.node as string);
  if (index < 0) {
    if (session.endError) throw session.endError;
    return GONE;
  }
  if (attempt.uncertain) cleanup.dropDuplicates(session, attempt, queue);
  if (index > 0) return { kind: 'behind', wait: { predecessor: `${attempt.parent}/${queue[index - 1]}` } };
  return 'head';
}
