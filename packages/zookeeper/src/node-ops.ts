import { TransportError } from '@dlock/core';
import { CREATE_MODE, type ZooKeeperAclLike } from './client-like.js';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import type { MultiOp, Session, SessionNodes } from './zookeeper-session.js';

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
 * The data version of a parent a try (a lock's, or a semaphore's take of a free slot) makes: created and written
 * once (empty) in the same multi. A delete can then name the version read (node-zookeeper-client sends a
 * transaction's version 0 as -1, any version), so that data written between the read and the delete refuses it.
 */
export const MADE_VERSION = 1;

/** A multi's ops that make a parent empty, with the open ACL, at MADE_VERSION: created, then written once. */
export function madeParent(path: string): MultiOp[] {
  return [
    { op: 'create', path, data: EMPTY, mode: CREATE_MODE.PERSISTENT },
    { op: 'setData', path, data: EMPTY },
  ];
}

/** The version a transaction's delete names for a parent read plain at `version` (0 cannot be named: any). */
export function deleteVersion(version: number): number {
  return version > 0 ? version : -1;
}

/**
 * What a parent's ACL read showed: no node, one a try may delete (at this version; `children` is its child count,
 * undefined when the stat lacks it), or one it must not.
 */
export type ParentLook =
  | 'missing'
  | 'foreign'
  | { readonly version: number; readonly children: number | undefined };

/**
 * Reads a parent's ACL and stat (one request) before a try deletes it: a try deletes and re-creates only a parent
 * with no data and the open ACL dlock gives its nodes, or those would be lost. A multi cannot check this itself:
 * its `check` and versioned delete compare the data version only, which `setAcl` leaves alone. Foreign too when
 * the stat has no version: then the parent is left alone.
 */
export async function lookAtParent(session: Session, parent: string): Promise<ParentLook> {
  const read = await session.getACL(parent);
  if (read === null) return 'missing';
  const { acls, stat } = read;
  if (!isOpenAcl(acls) || stat.dataLength !== 0 || stat.version === undefined) return 'foreign';
  return { version: stat.version, children: stat.numChildren };
}

/**
 * Reads a node about to be deleted: its data version if it is as dlock makes it (no data, the open ACL), 'foreign'
 * if not, 'missing' if it is gone. A delete at that version refuses data written since (an ACL set in the one round
 * trip between is not seen: no delete can name an ACL version).
 */
export async function readPlain(session: Session, path: string): Promise<number | 'foreign' | 'missing'> {
  const read = await session.getACL(path);
  if (read === null) return 'missing';
  if (read.stat.dataLength !== 0 || !isOpenAcl(read.acls)) return 'foreign';
  return read.stat.version ?? -1;
}

/**
 * Deletes an idle lock parent only if it is as dlock makes it ({@link readPlain}), at the version read;
 * NotEmpty (someone queued since), NoNode (someone else deleted it) and BadVersion (written since) are fine.
 * Resolves 'kept' for a parent with data or another ACL, which is someone's to keep.
 */
export async function removePlainParent(session: Session, parent: string): Promise<'kept' | undefined> {
  const version = await readPlain(session, parent);
  if (version === 'foreign') return 'kept';
  if (version === 'missing') return undefined;
  try {
    await session.remove(parent, version);
  } catch (error) {
    const code = zkErrorCode(error);
    if (code !== ZK_ERROR.NOT_EMPTY && code !== ZK_ERROR.NO_NODE && code !== ZK_ERROR.BAD_VERSION)
      throw error;
  }
  return undefined;
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
