/**
 * The floor: one put-if-absent transaction to acquire and one guarded delete transaction to release, on a lease
 * granted once and shared by every lock (kept alive by etcd3's own `Lease` loop, a trickle of keep-alives). No
 * queue: when it has to wait it polls (a fixed retry delay, as the peers do). Scenario C's locks ride the shared
 * lease, so renewing all of them is that one keep-alive loop.
 */
import { now, packageVersion, sleep } from '../lib/index.mjs';
import { connectEtcd } from './client.mjs';

const PREFIX = 'dlock-bench-raw/';

export function rawSubject({ retryDelayMs = 10, retryJitterMs = 5 } = {}) {
  let etcd;
  let lease;
  let leaseId;

  const tryOnce = async (key) => {
    const response = await etcd.client.kv.txn(
      {
        compare: [{ key, target: 'Create', result: 'Equal', create_revision: '0' }],
        success: [{ request_put: { key, value: Buffer.alloc(0), lease: leaseId } }],
      },
      { deadline: Date.now() + 5000 },
    );
    if (!response.succeeded) return null;
    const revision = response.header.revision;
    return {
      release: () =>
        etcd.client.kv.txn(
          {
            compare: [{ key, target: 'Create', result: 'Equal', create_revision: revision }],
            success: [{ request_delete_range: { key } }],
          },
          { deadline: Date.now() + 5000 },
        ),
    };
  };

  const acquire = async (name, { waitMs, signal }) => {
    const key = Buffer.from(`${PREFIX}${name}`);
    const deadline = now() + waitMs;
    for (;;) {
      const held = await tryOnce(key);
      if (held) return held;
      const left = deadline - now();
      if (left <= 0 || signal?.aborted) return null;
      await sleep(Math.min(left, retryDelayMs + (Math.random() * 2 - 1) * retryJitterMs), signal);
    }
  };

  return {
    name: 'raw etcd3 (2 txns)',
    version: `etcd3 ${packageVersion('etcd3')}`,
    baseline: true,
    config: `kv.txn put-if-absent (CreateRevision = 0) + guarded delete txn, one shared 30 s lease kept alive by etcd3; waits poll every ${retryDelayMs}±${retryJitterMs} ms`,
    countRequests: () => etcd.countRequests(),
    async setup() {
      etcd = connectEtcd();
      lease = etcd.client.lease(30);
      lease.on('lost', () => {});
      leaseId = await lease.grant();
    },
    acquire,
    async hold(name) {
      const held = await acquire(name, { waitMs: 0 });
      if (!held) throw new Error(`raw: ${name} is busy`);
      return held;
    },
    async close() {
      await lease?.revoke().catch(() => {});
      etcd?.client.close();
    },
  };
}
