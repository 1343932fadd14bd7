import type { PermitHolder, PermitsInfo } from '@dlock/core';
import { isQueueNode, permitQueuePath, permitSlotsPath, semaphorePath, slotOf } from './keys.js';
import { decodePermitData } from './node-data.js';
import { childrenOf } from './node-ops.js';
import type { PermitSlots } from './permit-slots.js';
import { czxidOf, type Session } from './zookeeper-session.js';

/**
 * `LockService.inspectPermits` on ZooKeeper: the holders are the slot nodes under `slots-<permits>`, each read for
 * the owner and metadata its create wrote and its czxid (the fencing token); the waiters are the queue nodes under
 * `queue-<permits>`. A slot node lives as long as its holder's session, whose remaining time no other client can see,
 * so a holder has no `expiresInMs`.
 *
 * A listing and then reads, not one atomic view: a slot released between the two is left out, one taken after the
 * listing is not seen. With no holders' parent for this limit, the semaphore is idle or in use with another limit,
 * which `available` tells apart (`PermitsMismatchError`).
 */
export async function readPermitsInfo(
  session: Session,
  root: string,
  slots: Pick<PermitSlots<never>, 'available'>,
  name: string,
  permits: number,
): Promise<PermitsInfo> {
  const semaphore = semaphorePath(root, name);
  const [listed, queue] = await Promise.all([
    childrenOf(session, permitSlotsPath(semaphore, permits)),
    childrenOf(session, permitQueuePath(semaphore, permits)),
  ]);
  if (listed === undefined) {
    await slots.available(session, name, permits);
    return { permits, held: [], waiters: 0 };
  }
  const reads = await Promise.all(
    listed.map(async (child) => {
      const slot = slotOf(child, permits);
      if (slot === undefined) return undefined;
      const read = await session.readNode(`${permitSlotsPath(semaphore, permits)}/${child}`);
      const record = decodePermitData(read?.data);
      if (read === null || record === undefined) return undefined;
      const holder: PermitHolder = { slot, ownerId: record.owner, fencingToken: czxidOf(read.stat) };
      return record.metadata === undefined ? holder : { ...holder, metadata: record.metadata };
    }),
  );
  const held = reads.filter((holder) => holder !== undefined).sort((a, b) => a.slot - b.slot);
  return { permits, held, waiters: (queue ?? []).filter(isQueueNode).length };
}
