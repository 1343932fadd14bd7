import { EventEmitter } from 'node:events';
import { TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type { EtcdClientLike, TxnRequestLike, TxnResponseLike } from './client-like.js';
import { EtcdLockService } from './etcd-lock-service.js';

/** A gRPC stream that takes writes and never answers. */
class SilentStream extends EventEmitter {
  write(): void {}
  end(): void {}
  cancel(): void {}
}

/** A keep-alive stream on which etcd confirms every lease at once, with a TTL of 2 s. */
class KeepAliveStream extends SilentStream {
  override write(item?: { ID?: string }): void {
    queueMicrotask(() => this.emit('data', { ID: item?.ID ?? '', TTL: '2' }));
  }
}

const never = <T>(): Promise<T> => new Promise<T>(() => {});

/**
 * An etcd in which someone is always ahead: every write and every re-read names another key before ours. It grants
 * and keeps alive leases and delivers no watch event, so a queued waiter moves only on the clock.
 */
function queueOfTwo() {
  const txns: TxnRequestLike[] = [];
  const kv = (key: Buffer | undefined, createRevision: number) => ({
    key: key ?? Buffer.alloc(0),
    create_revision: String(createRevision),
    mod_revision: String(createRevision),
    lease: '1',
  });
  const ahead = Buffer.from('dlock/x/other_0');
  const client: EtcdClientLike = {
    kv: {
      txn: async (request): Promise<TxnResponseLike> => {
        txns.push(request);
        const own = request.failure?.[1]?.request_put?.key ?? request.success?.[0]?.request_range?.key;
        const header = { revision: '10' };
        if (request.compare?.length) {
          const mine = kv(own, 10);
          return {
            header,
            succeeded: false,
            responses: [
              { response_range: { header, kvs: [] } },
              {},
              { response_range: { header, kvs: [mine] } },
              { response_range: { header, kvs: [kv(ahead, 7)] } },
              { response_range: { header, kvs: [mine, kv(ahead, 7)] } },
            ],
          };
        }
        return {
          header,
          succeeded: true,
          responses: [
            { response_range: { header, kvs: [kv(own, 10)] } },
            { response_range: { header, kvs: [kv(ahead, 7)] } },
          ],
        };
      },
    },
    leaseClient: {
      leaseGrant: async () => ({ ID: '1', TTL: '2' }),
      leaseRevoke: async () => ({}),
      leaseKeepAlive: async () => new KeepAliveStream(),
    },
    watchClient: { watch: async () => new SilentStream() },
  };
  const rechecks = () =>
    txns.filter((t) => !t.compare?.length && !t.success?.some((op) => op.request_delete_range)).length;
  return { client, rechecks };
}

describe('EtcdLockService on an injected clock', () => {
  it('bounds a request that never answers by requestTimeoutMs of that clock', async () => {
    const clock = new FakeClock();
    const client: EtcdClientLike = {
      kv: { txn: never },
      leaseClient: { leaseGrant: never, leaseRevoke: never, leaseKeepAlive: never },
      watchClient: { watch: never },
    };
    const service = new EtcdLockService({ client, clock, requestTimeoutMs: 1_000 });
    let outcome: unknown;
    service
      .acquire({ name: 'x', ownerId: 'o', ttlMs: 2_000, waitMs: 0, signal: new AbortController().signal })
      .then(
        (value) => {
          outcome = value;
        },
        (error: unknown) => {
          outcome = error;
        },
      );
    await clock.advance(999);
    expect(outcome).toBeUndefined();
    await clock.advance(1);
    expect(outcome).toBeInstanceOf(TransportError);
  });

  it('re-reads a queued waiter’s place at the poll floor of that clock when no watch event comes', async () => {
    const clock = new FakeClock();
    const { client, rechecks } = queueOfTwo();
    const service = new EtcdLockService({ client, clock, session: true });
    const abort = new AbortController();
    const waiting = service.acquire({
      name: 'x',
      ownerId: 'o',
      ttlMs: 2_000,
      waitMs: 60_000,
      signal: abort.signal,
    });
    waiting.catch(() => {});
    await clock.advance(0);
    expect(rechecks()).toBe(0);
    await clock.advance(4_999);
    expect(rechecks()).toBe(0);
    await clock.advance(1);
    expect(rechecks()).toBe(1);
    await clock.advance(5_000);
    expect(rechecks()).toBe(2);
    const reason = new Error('gave up');
    abort.abort(reason);
    await expect(waiting).rejects.toBe(reason);
  });

  it('gives up at the end of the wait without another re-read, as no notice came', async () => {
    const clock = new FakeClock();
    const { client, rechecks } = queueOfTwo();
    const service = new EtcdLockService({ client, clock, session: true });
    const signal = new AbortController().signal;
    let outcome: unknown;
    service.acquire({ name: 'x', ownerId: 'o', ttlMs: 2_000, waitMs: 7_000, signal }).then((result) => {
      outcome = result;
    });
    await clock.advance(5_000);
    expect(rechecks()).toBe(1);
    await clock.advance(2_000);
    expect(outcome).toEqual({ acquired: false });
    expect(rechecks()).toBe(1);
  });
});
