import type { LockInfo } from '@dlock/core';
import type { KvClientLike } from './client-like.js';
import type { EtcdRequests } from './requests.js';
import { decodeMetadata, decodeOwnerId } from './values.js';

/**
 * A lock as etcd holds it now, in one linearizable read: the key with the lowest create revision in its directory
 * (the holder: its create revision is the fencing token, its value the metadata or, for a grant without metadata,
 * the owner id) and how many keys queue behind it. This is Go's `Election.Leader` plus the count. A grant with
 * metadata has no owner id to report: its value is the metadata alone, as Go's `Election` stores a leader's value.
 *
 * "Held" is the key's existence. etcd deletes the key when its lessor revokes the expired lease, which it checks for
 * every 500 ms, so a key can outlive its lease by about that long; nothing in etcd's API tells that state apart from
 * the lease's last second (`LeaseTimeToLive` answers 0 for both), and no other contender can take the lock before
 * the delete anyway. For the same reason no `expiresInMs` is given: etcd reports a lease's remaining life only in
 * whole seconds, rounded down.
 */
export async function inspectLock(
  kv: KvClientLike,
  requests: EtcdRequests,
  directory: Buffer,
  rangeEnd: Buffer,
): Promise<LockInfo> {
  const response = await requests.run('inspect', (options) =>
    kv.txn(
      {
        success: [
          {
            request_range: {
              key: directory,
              range_end: rangeEnd,
              sort_target: 'Create',
              sort_order: 'Ascend',
              limit: 1,
            },
          },
        ],
      },
      options,
    ),
  );
  const range = response.responses[0]?.response_range;
  const holder = range?.kvs[0];
  if (!holder) return { held: false };
  const metadata = decodeMetadata(holder.value);
  const ownerId = decodeOwnerId(holder.value);
  const count = Number(range?.count ?? 1);
  return {
    held: true,
    ...(ownerId === undefined ? {} : { ownerId }),
    fencingToken: BigInt(holder.create_revision),
    ...(metadata === undefined ? {} : { metadata }),
    waiters: Number.isSafeInteger(count) && count > 1 ? count - 1 : 0,
  };
}
