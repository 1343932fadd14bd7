/**
 * etcd3's own `lock()`: a lease per lock (granted, kept alive by etcd3's `Lease` loop, revoked on release) and a
 * put-if-absent transaction. It does not wait: a busy lock throws `EtcdLockFailedError`, so waits poll with a
 * fixed retry delay. Scenario C keeps each lock by its lease's own keep-alive loop (at a third of the TTL).
 */
import { now, packageVersion, sleep } from '../lib/index.mjs';
import { connectEtcd } from './client.mjs';

const PREFIX = 'dlock-bench-etcd3/';

export function etcd3LockSubject({ retryDelayMs = 10, retryJitterMs = 5 } = {}) {
  let etcd;

  const acquire = async (name, { ttlMs, waitMs, signal }, onLost) => {
    const deadline = now() + waitMs;
    for (;;) {
      const lock = etcd.client.lock(`${PREFIX}${name}`).ttl(Math.ceil(ttlMs / 1000));
      try {
        await lock.acquire();
        // The lease is private to Lock; its `lost` event is etcd3's only loss signal (fired after about 2 × TTL).
        if (onLost) lock.lease?.on('lost', () => onLost());
        return { release: () => lock.release() };
      } catch (error) {
        if (error?.name !== 'EtcdLockFailedError') throw error;
      }
      const left = deadline - now();
      if (left <= 0 || signal?.aborted) return null;
      await sleep(Math.min(left, retryDelayMs + (Math.random() * 2 - 1) * retryJitterMs), signal);
    }
  };

  return {
    name: 'etcd3 lock()',
    version: packageVersion('etcd3'),
    config: `Lock.ttl(ceil(ttl s)).acquire() / release(); waits poll every ${retryDelayMs}±${retryJitterMs} ms (it does not queue)`,
    countRequests: () => etcd.countRequests(),
    async setup() {
      etcd = connectEtcd();
    },
    acquire: (name, options) => acquire(name, options),
    async hold(name, { ttlMs, onLost }) {
      const held = await acquire(name, { ttlMs, waitMs: 0 }, onLost);
      if (!held) throw new Error(`etcd3 lock(): ${name} is busy`);
      return held;
    },
    async close() {
      etcd?.client.close();
    },
  };
}
