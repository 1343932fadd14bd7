import { EventEmitter } from 'node:events';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type {
  EtcdClientLike,
  KeyValueLike,
  TxnRequestLike,
  TxnResponseLike,
  WatchRequestLike,
} from './client-like.js';
import { EtcdLockService } from './etcd-lock-service.js';

/** A gRPC stream that takes writes and never answers. */
class SilentStream extends EventEmitter {
  write(_item?: unknown): void {}
  end(): void {}
  cancel(): void {}
}

/** A keep-alive stream on which etcd confirms every lease at once, with a TTL of 2 s. */
class KeepAliveStream extends SilentStream {
  keepAlives = 0;
  override write(item?: { ID?: string }): void {
    this.keepAlives += 1;
    queueMicrotask(() => this.emit('data', { ID: item?.ID ?? '', TTL: '2' }));
  }
}

/** A watch stream that confirms each watch and lets the test send a delete to the last one created. */
class WatchStream extends SilentStream {
  last: { id: string; key: string } | undefined;
  override write(item?: WatchRequestLike): void {
    const create = item?.create_request;
    if (!create) return;
    this.last = { id: create.watch_id ?? '', key: create.key?.toString() ?? '' };
    const id = this.last.id;
    queueMicrotask(() =>
      this.emit('data', {
        header,
        watch_id: id,
        created: true,
        canceled: false,
        compact_revision: '0',
        events: [],
      }),
    );
  }
  deleted(key: string, revision: number): void {
    const watchId = this.last?.id ?? '';
    this.emit('data', {
      header: { revision: String(revision) },
      watch_id: watchId,
      created: false,
      canceled: false,
      compact_revision: '0',
      events: [{ type: 'Delete', kv: kv(Buffer.from(key), revision) }],
    });
  }
}

const header = { revision: '10' };
const kv = (key: Buffer, createRevision: number): KeyValueLike => ({
  key,
  create_revision: String(createRevision),
  mod_revision: String(createRevision),
  lease: '1',
});
const range = (kvs: KeyValueLike[]) => ({ response_range: { header, kvs } });
const SLOTS = 'dlock/%sem/x/2/s/';

/**
 * An etcd in which the semaphore `x` (2 permits) is full and nobody else waits: an enqueue writes the first queue
 * key (create revision 10), every re-read finds it first with both slots taken, and a take of a slot succeeds at
 * revision 13. It delivers only the watch events the test sends.
 */
function fullSemaphore() {
  const txns: TxnRequestLike[] = [];
  const keepAlive = new KeepAliveStream();
  const watch = new WatchStream();
  const slots = [kv(Buffer.from(`${SLOTS}0`), 5), kv(Buffer.from(`${SLOTS}1`), 6)];
  let revokes = 0;
  const client: EtcdClientLike = {
    kv: {
      txn: async (request): Promise<TxnResponseLike> => {
        txns.push(request);
        const inner = request.success?.[0]?.request_txn;
        if (inner) {
          // Refused (both slots taken, none by this attempt): the reads after the check for our own slot key.
          const refused = inner.failure?.[0]?.request_txn;
          const queueKey = refused?.failure?.[1]?.request_put?.key;
          const responses = queueKey
            ? [range([]), {}, range([kv(queueKey, 10)]), range([kv(queueKey, 10)]), range(slots)]
            : [range([]), range(slots)];
          const reads = { response_txn: { header, succeeded: false, responses } };
          return {
            header,
            succeeded: true,
            responses: [{ response_txn: { header, succeeded: false, responses: [reads] } }],
          };
        }
        const first = request.compare?.[0];
        if (first?.result === 'Greater') {
          const own = request.success?.[0]?.request_range?.key ?? Buffer.alloc(0);
          return { header, succeeded: true, responses: [range([kv(own, 10)]), range(slots)] };
        }
        // A take of a slot, or a delete.
        return { header: { revision: '13' }, succeeded: true, responses: [] };
      },
    },
    leaseClient: {
      leaseGrant: async () => ({ ID: '1', TTL: '2' }),
      leaseRevoke: async () => {
        revokes += 1;
        return {};
      },
      leaseKeepAlive: async () => keepAlive,
    },
    watchClient: { watch: async () => watch },
  };
  const positionReads = () => txns.filter((t) => t.compare?.[0]?.result === 'Greater').length;
  const takes = () =>
    txns.filter(
      (t) => t.success?.some((op) => op.request_delete_range) && t.success?.some((op) => op.request_put),
    );
  return { client, txns, keepAlive, watch, positionReads, takes, revokes: () => revokes };
}

const request = (signal: AbortSignal, waitMs = 60_000) => ({
  name: 'x',
  ownerId: 'o',
  ttlMs: 2_000,
  waitMs,
  signal,
  permits: 2,
});

for (const session of [false, true]) {
  describe(`EtcdLockService semaphores on an injected clock (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('a first waiter with no notice re-reads only at the poll floor, keeping its lease alive meanwhile', async () => {
      const clock = new FakeClock();
      const etcd = fullSemaphore();
      const service = new EtcdLockService({ client: etcd.client, clock, session });
      const abort = new AbortController();
      const waiting = service.acquirePermit(request(abort.signal));
      waiting.catch(() => {});
      await clock.advance(0);
      const written = etcd.txns.length;
      expect(etcd.positionReads()).toBe(0);
      await clock.advance(4_999);
      expect(etcd.positionReads()).toBe(0);
      expect(etcd.txns.length).toBe(written);
      // The waiter's lease, renewed every third of its 2 s TTL while it queues.
      expect(etcd.keepAlive.keepAlives).toBeGreaterThanOrEqual(6);
      await clock.advance(1);
      expect(etcd.positionReads()).toBe(1);
      const reason = new Error('gave up');
      abort.abort(reason);
      await expect(waiting).rejects.toBe(reason);
      await clock.advance(0);
      // Leaving: a lease of its own is revoked; on a session the queue key is deleted by its create revision.
      if (!session) expect(etcd.revokes()).toBe(1);
      else {
        const leave = etcd.txns.at(-1)?.success?.[0]?.request_txn;
        expect(leave?.compare?.[0]).toMatchObject({ target: 'Create', create_revision: '10' });
        expect(leave?.success?.[0]?.request_delete_range?.key?.toString()).toMatch(/^dlock\/%sem\/x\/2\/q\//);
      }
      await service.close();
    });

    it('a slot key deleted under the first waiter is taken in one transaction, with no re-read first', async () => {
      const clock = new FakeClock();
      const etcd = fullSemaphore();
      const service = new EtcdLockService({ client: etcd.client, clock, session });
      const waiting = service.acquirePermit(request(new AbortController().signal));
      await clock.advance(0);
      expect(etcd.watch.last?.key).toBe(SLOTS);
      etcd.watch.deleted(`${SLOTS}1`, 12);
      const result = await waiting;
      expect(result.acquired && result.grant).toMatchObject({ slot: 1, fencingToken: 13n });
      expect(etcd.positionReads()).toBe(0);
      const [take] = etcd.takes();
      expect(take?.compare?.map((c) => [c.key?.toString(), c.create_revision])).toEqual([
        [expect.stringMatching(/^dlock\/%sem\/x\/2\/q\//), '10'],
        [`${SLOTS}1`, '0'],
      ]);
      await service.close();
    });
  });
}
