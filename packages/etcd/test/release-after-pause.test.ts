import { Worker } from 'node:worker_threads';
import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { lockName, TEST_PREFIX } from './helpers.js';

// Depends on core's release() of a handle whose window closed during a pause: Lost (`expired`), onLost once,
// rejecting with LockLostError. On a core without that change, release() resolves as if it had released.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const TTL_MS = 2_000;

interface Message {
  readonly type: 'acquired' | 'released' | 'error';
  readonly token?: bigint;
  readonly settled?: 'resolved' | 'rejected';
  readonly code?: string;
  readonly reason?: string;
  readonly state?: string;
  readonly lostCalls?: number;
  readonly lostReason?: string;
  readonly message?: string;
}

for (const session of [false, true]) {
  describe(`release() after a pause past the TTL (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('rejects with LockLostError (expired), calls onLost once, and leaves the successor holding the lock', {
      timeout: 30_000,
    }, async () => {
      const name = lockName('frozen');
      const gate = new SharedArrayBuffer(4);
      const worker = new Worker(new URL('./fixtures/frozen-holder.mjs', import.meta.url), {
        workerData: { endpoint: ETCD_ENDPOINT, prefix: TEST_PREFIX, name, session, ttlMs: TTL_MS, gate },
      });
      const messages: Message[] = [];
      const waiting = new Map<Message['type'], (m: Message) => void>();
      worker.on('message', (m: Message) => {
        messages.push(m);
        waiting.get(m.type)?.(m);
      });
      const next = (type: Message['type'], ms: number): Promise<Message> =>
        new Promise((resolve, reject) => {
          const found = messages.find((m) => m.type === type);
          if (found) return resolve(found);
          const timer = setTimeout(
            () => reject(new Error(`no "${type}" from the holder within ${ms} ms`)),
            ms,
          );
          waiting.set(type, (m) => {
            clearTimeout(timer);
            resolve(m);
          });
        });
      const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session });
      const successor = new LockClient(service);
      try {
        const acquired = await next('acquired', 15_000);
        if (acquired.token === undefined) throw new Error(`the holder did not acquire: ${acquired.message}`);
        // The holder is frozen now; the successor is served once etcd expires the holder's lease.
        const handle = await successor.acquire(name, { ttlMs: TTL_MS, waitMs: 10_000 });
        expect(handle.fencingToken).toBeGreaterThan(acquired.token);
        Atomics.store(new Int32Array(gate), 0, 1);
        Atomics.notify(new Int32Array(gate), 0);
        const released = await next('released', 10_000);
        expect(released).toMatchObject({
          settled: 'rejected',
          code: 'LOCK_LOST',
          reason: 'expired',
          state: 'lost',
          lostCalls: 1,
          lostReason: 'expired',
        });
        // The late release removed nothing of the successor's: its key is still the only one, and still its own.
        expect(handle.isHeld()).toBe(true);
        const { kvs } = await etcd
          .getAll()
          .prefix(`${TEST_PREFIX}${escapeName(name)}/`)
          .exec();
        expect(kvs.map((kv) => BigInt(kv.create_revision))).toEqual([handle.fencingToken]);
        await handle.release();
      } finally {
        Atomics.store(new Int32Array(gate), 0, 1);
        Atomics.notify(new Int32Array(gate), 0);
        await Promise.race([
          new Promise((resolve) => worker.once('exit', resolve)),
          new Promise((resolve) => setTimeout(resolve, 5_000)),
        ]);
        await worker.terminate();
        await successor.close();
        await service.close();
      }
    });
  });
}
