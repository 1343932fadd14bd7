import { performance } from 'node:perf_hooks';
import { LockClient, TransportError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import {
  type EtcdCluster,
  rejection,
  startEtcdCluster,
  startTcpProxy,
  type TcpProxy,
} from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import { lockName, queueLength, waitUntil } from './helpers.js';

// A private member behind a proxy that can swallow replies: the acquire's write reaches etcd, its answer never comes
// back. The contender talks to the member directly and sees what etcd really holds.

const PREFIX = 'dlock-lost-reply/';
const TTL_MS = 10_000;
const OPERATION_TIMEOUT_MS = 1_000;
/** The bound under test is operationTimeoutMs + 1 s; the rest is slack for timers and a watch on a loaded machine. */
const SLACK_MS = 750;

let cluster: EtcdCluster;
let direct: Etcd3;
const teardown: (() => Promise<unknown> | unknown)[] = [];

beforeAll(async () => {
  cluster = await startEtcdCluster({ size: 1 });
  teardown.push(() => cluster.stop());
  const member = cluster.members[0];
  if (!member) throw new Error('no member');
  direct = new Etcd3({ hosts: member.endpoint });
  teardown.push(() => direct.close());
}, 60_000);

afterAll(async () => {
  for (const fn of teardown.splice(0).reverse())
    await Promise.resolve()
      .then(fn)
      .catch(() => {});
});

/** The proxied client, wrapped so that once armed, replies are dropped from the moment a contender key's write is sent. */
function dropRepliesFromTheWrite(
  client: Etcd3,
  proxy: TcpProxy,
): { client: EtcdClientLike; arm: () => void } {
  let armed = false;
  return {
    client: {
      kv: {
        txn: (request, options) => {
          if (armed && request.success?.some((op) => op.request_put)) proxy.dropReplies(true);
          return client.kv.txn(request, options);
        },
      },
      leaseClient: client.leaseClient,
      watchClient: client.watchClient,
    },
    arm: () => {
      armed = true;
    },
  };
}

for (const session of [false, true]) {
  describe(`an acquire whose reply is lost (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('takes its key back as soon as core gives up, so a contender gets the lock within operationTimeoutMs + 1 s', {
      timeout: 30_000,
    }, async () => {
      // A proxy of its own: grpc-js shares connections between clients of one address, and this one ends broken.
      const proxy = await startTcpProxy({ targetPort: cluster.members[0]?.clientPort ?? 0 });
      const proxied = new Etcd3({ hosts: `http://127.0.0.1:${proxy.port}` });
      const faulty = dropRepliesFromTheWrite(proxied, proxy);
      const service = new EtcdLockService({
        client: faulty.client,
        prefix: PREFIX,
        session,
      });
      const locks = new LockClient(service, { operationTimeoutMs: OPERATION_TIMEOUT_MS });
      const other = new EtcdLockService({ client: direct, prefix: PREFIX, session });
      const contender = new LockClient(other);
      const name = lockName('lost-reply');
      try {
        // Warm up: the connection, and in session mode the session lease, exist before replies are dropped.
        await (await locks.acquire(lockName('warm-up'), { ttlMs: TTL_MS })).release();
        faulty.arm();
        const startedAt = performance.now();
        const stray = rejection(locks.acquire(name, { ttlMs: TTL_MS }));
        // The write landed: etcd holds our key (the reply that would say so is lost).
        expect(await waitUntil(async () => (await queueLength(direct, PREFIX, name)) === 1, 2_000)).toBe(
          true,
        );
        const next = contender.acquire(name, { ttlMs: 2_000, waitMs: 15_000 });
        expect(await stray).toBeInstanceOf(TransportError);
        const handle = await next;
        const tookMs = performance.now() - startedAt;
        expect(handle.isHeld()).toBe(true);
        expect(tookMs).toBeLessThan(OPERATION_TIMEOUT_MS + 1_000 + SLACK_MS);
        await handle.release();
      } finally {
        await proxy.close();
        await contender.close();
        await other.close();
        await locks.close();
        await service.close();
        proxied.close();
      }
    });
  });
}
