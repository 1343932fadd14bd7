import { type LockInfo, TransportError } from '@dlock/core';
import { ZK_ERROR, zkErrorCode } from './errors.js';
import { queueOrder } from './keys.js';
import { decodeMetadata, decodeOwnerId } from './node-data.js';
import { czxidOf, type Session } from './zookeeper-session.js';

/** Listings of the queue before giving up on a lock whose every listed node went before it could be read. */
const MAX_LISTINGS = 3;
const FREE: LockInfo = Object.freeze({ held: false });

/**
 * `LockService.inspect` on ZooKeeper: the holder is the queue's first node, so the lock is held exactly while a
 * queue node exists (an ephemeral node goes with its session: the server's own expiry), the fencing token is that
 * node's czxid, the owner id and metadata are in its data, and every later node is a waiter. The session's expiry is the
 * server's business and not visible to clients, so there is no `expiresInMs`.
 *
 * Two reads, not one atomic one: the listed head can go before its data is read. Nodes created after the listing
 * sort after every listed one, so the first listed node still there is the head at the time it is read.
 */
export async function readLockInfo(session: Session, parent: string): Promise<LockInfo> {
  for (let listing = 0; listing < MAX_LISTINGS; listing++) {
    const queue = queueOrder(await childrenOf(session, parent));
    if (queue.length === 0) return FREE;
    for (let i = 0; i < queue.length; i++) {
      const read = await session.readNode(`${parent}/${queue[i]}`);
      if (read === null) continue;
      const metadata = decodeMetadata(read.data);
      const ownerId = decodeOwnerId(read.data);
      return {
        held: true,
        ...(ownerId === undefined ? {} : { ownerId }),
        fencingToken: czxidOf(read.stat),
        waiters: queue.length - i - 1,
        ...(metadata === undefined ? {} : { metadata }),
      };
    }
  }
  throw new TransportError(`the holder of ${parent} changed faster than it could be read`);
}

async function childrenOf(session: Session, parent: string): Promise<string[]> {
  try {
    return await session.getChildren(parent);
  } catch (error) {
    if (zkErrorCode(error) === ZK_ERROR.NO_NODE) return [];
    throw error;
  }
}
