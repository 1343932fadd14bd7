import { TransportError } from '@dlock/core';
import { CREATE_MODE, type ZooKeeperAclLike } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import type { Session, SessionNodes } from './zookeeper-session.js';

/** Node requests whose expected refusals (NoNode, NodeExists) are outcomes rather than errors, for both drivers. */

export const EMPTY = Buffer.alloc(0);

/** The nodes to delete when one node's name is known and its attempt does not matter. */
export function nodesAt(parent: string, node: string): SessionNodes {
  return { parent, node, attemptId: undefined, uncertain: false, giveUpAt: undefined };
}

/** Deletes a node; NoNode (already gone) is success. */
export async function removeNode(session: Session, path: string): Promise<void> {
  try {
    await session.remove(path);
  } catch (error) {
    if (zkErrorCode(error) !== ZK_ERROR.NO_NODE) throw error;
  }
}

/** A node's children (leaving a child watch when `watcher` is given); undefined if it does not exist. */
export async function childrenOf(
  session: Session,
  parent: string,
  watcher?: () => void,
): Promise<string[] | undefined> {
  try {
    return await session.getChildren(parent, watcher);
  } catch (error) {
    if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return undefined;
    throw error;
  }
}

/** ZooKeeper's `Permission.ALL`. */
const ALL_PERMISSIONS = 31;

/** The open ACL (world:anyone, every permission), which every node dlock creates gets. */
export function isOpenAcl(acls: readonly ZooKeeperAclLike[]): boolean {
  const [only] = acls;
  return (
    acls.length === 1 &&
    only?.permission === ALL_PERMISSIONS &&
    only.id.scheme === 'world' &&
    only.id.id === 'anyone'
  );
}

/**
 * Deletes an idle lock parent only if it is as dlock makes it, read first: no data, and the open ACL when the
 * client can read ACLs. At the version read, so that data written since refuses the delete; NotEmpty (someone
 * queued since) and NoNode (someone else deleted it) are fine.
 */
export async function removePlainParent(session: Session, parent: string): Promise<void> {
  const read =
    typeof session.client.getACL === 'function'
      ? await session.getACL(parent)
      : await session.exists(parent).then((stat) => (stat ? { acls: undefined, stat } : null));
  if (read === null || read.stat.dataLength !== 0) return;
  if (read.acls !== undefined && !isOpenAcl(read.acls)) return;
  try {
    await session.remove(parent, read.stat.version ?? -1);
  } catch (error) {
    const code = zkErrorCode(error);
    if (code !== ZK_ERROR.NOT_EMPTY && code !== ZK_ERROR.NO_NODE && code !== ZK_ERROR.BAD_VERSION)
      throw error;
  }
}

/** Creates a persistent node; true if it exists now, false if its parent is missing. */
export async function createPersistent(session: Session, path: string): Promise<boolean> {
  try {
    await session.create(path, EMPTY, CREATE_MODE.PERSISTENT);
    return true;
  } catch (error) {
    const code = zkErrorCode(error);
    if (code === ZK_ERROR.NODE_EXISTS) return true;
    if (code === ZK_ERROR.NO_NODE) return false;
    throw error;
  }
}

/** Creates a lock's parent; when the root is missing too, it first, segment by segment. */
export async function createLockParent(session: Session, root: string, parent: string): Promise<void> {
  if (await createPersistent(session, parent)) return;
  const segments = root.slice(1).split('/');
  for (let i = 1; i <= segments.length; i++) {
    await createPersistent(session, `/${segments.slice(0, i).join('/')}`);
  }
  if (!(await createPersistent(session, parent))) {
    throw new TransportError(`could not create the lock node ${parent}`);
  }
}
