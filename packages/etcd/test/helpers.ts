import { uniqueName } from '@dlock/test-utils';
import type { Etcd3 } from 'etcd3';
import type { EtcdClientLike, TxnRequestLike } from '../src/client-like.js';
import { escapeName } from '../src/keys.js';

export const TEST_PREFIX = 'dlock-test/';

/** Requests a service sent, by kind, seen through a wrapper around the real client. */
export interface RequestCounts {
  /** Transactions that write a contender key (one per acquire attempt). */
  enqueue: number;
  /** Transactions that only read: a queued contender re-reading its place after a wake-up. */
  recheck: number;
  /** Transactions that delete a key (release or leaving the queue in session mode). */
  remove: number;
  grant: number;
  revoke: number;
  keepAlive: number;
  /** Every key a contender wrote, in order. */
  putKeys: string[];
}

export function countingClient(client: Etcd3): { client: EtcdClientLike; counts: RequestCounts } {
  const counts: RequestCounts = {
    enqueue: 0,
    recheck: 0,
    remove: 0,
    grant: 0,
    revoke: 0,
    keepAlive: 0,
    putKeys: [],
  };
  const classify = (request: TxnRequestLike): void => {
    // A nested transaction's branches count as the request's own (a semaphore's enqueue nests its writes).
    const ops = (request.success ?? []).flatMap((op) =>
      op.request_txn ? [...(op.request_txn.success ?? []), ...(op.request_txn.failure ?? [])] : [op],
    );
    const put = ops.find((op) => op.request_put)?.request_put;
    if (put) {
      counts.enqueue += 1;
      counts.putKeys.push(put.key?.toString('utf8') ?? '');
    }
    if (put) return;
    if (ops.some((op) => op.request_delete_range)) counts.remove += 1;
    else counts.recheck += 1;
  };
  const wrapped: EtcdClientLike = {
    kv: {
      txn: (request, options) => {
        classify(request);
        return client.kv.txn(request, options);
      },
    },
    leaseClient: {
      leaseGrant: (request, options) => {
        counts.grant += 1;
        return client.leaseClient.leaseGrant(request, options);
      },
      leaseRevoke: (request, options) => {
        counts.revoke += 1;
        return client.leaseClient.leaseRevoke(request, options);
      },
      leaseKeepAlive: async (options) => {
        const stream = await client.leaseClient.leaseKeepAlive(options);
        const write = stream.write.bind(stream);
        stream.write = (item) => {
          counts.keepAlive += 1;
          write(item);
        };
        return stream;
      },
    },
    watchClient: client.watchClient,
  };
  return { client: wrapped, counts };
}

/** How many contender keys a lock has in etcd right now (holder plus queue). */
export function queueLength(client: Etcd3, prefix: string, name: string): Promise<number> {
  return client
    .getAll()
    .prefix(`${prefix}${escapeName(name)}/`)
    .count();
}

export async function waitUntil(
  predicate: () => Promise<boolean> | boolean,
  maxMs: number,
): Promise<boolean> {
  const deadline = Date.now() + maxMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export const lockName = (label: string): string => uniqueName(label);
