import { decodeLockName, encodeLockName, limitOf } from './keys.js';
import { childrenOf, readPlain } from './node-ops.js';
import type { MultiOp, Session } from './zookeeper-session.js';

/**
 * Deletes an idle semaphore's node with its two parents, in one `multi`: NotEmpty (someone holds or waits again),
 * NoNode (someone else deleted it) or BadVersion (data written since) leave everything as it is. Each node is read
 * first (pipelined, one round trip): a semaphore with a node someone gave data or another ACL is theirs to keep,
 * and resolves 'kept'.
 */
export async function removeIdleSemaphore(session: Session, semaphore: string): Promise<'kept' | undefined> {
  const children = await childrenOf(session, semaphore);
  if (children === undefined) return undefined;
  const paths = [...children.map((child) => `${semaphore}/${child}`), semaphore];
  const versions = await Promise.all(paths.map((path) => readPlain(session, path)));
  if (versions.includes('foreign')) return 'kept';
  const ops: MultiOp[] = [];
  for (const [i, path] of paths.entries()) {
    const version = versions[i];
    if (typeof version !== 'number') return undefined;
    ops.push({ op: 'remove', path, version });
  }
  await session.multi(ops);
  return undefined;
}

/**
 * For the sweep of semaphores every process left behind: a stamp of a semaphore node with no holder and no waiter
 * (the pzxids of the node and of its empty parents, which change with every child created or deleted), or
 * undefined when it is in use or not a semaphore's node.
 */
export async function idleSemaphoreStamp(
  session: Session,
  semaphore: string,
  name: string,
): Promise<string | undefined> {
  const stat = await session.exists(semaphore);
  if (!stat || stat.pzxid === undefined || stat.dataLength !== 0) return undefined;
  if (stat.ephemeralOwner.some((byte) => byte !== 0) || !isEncodedName(name)) return undefined;
  const children = (await childrenOf(session, semaphore)) ?? [];
  // Normally one pair of parents; more (a stray parent of another limit) are idle all the same when empty.
  if (children.some((child) => limitOf(child) === undefined)) return undefined;
  const stamps = [stat.pzxid.toString('hex')];
  for (const child of children) {
    const parent = await session.exists(`${semaphore}/${child}`);
    if (parent?.numChildren !== 0 || parent.pzxid === undefined) return undefined;
    stamps.push(parent.pzxid.toString('hex'));
  }
  return stamps.join(':');
}

function isEncodedName(name: string): boolean {
  try {
    return encodeLockName(decodeLockName(name)) === name;
  } catch {
    return false;
  }
}
