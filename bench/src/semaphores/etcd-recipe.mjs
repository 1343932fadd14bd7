/**
 * The semaphore an etcd user writes by hand on etcd3: slot keys `<name>/<0..N-1>`, each created under the worker's
 * lease only if absent (a txn comparing its create revision with 0); the token is the create revision. To acquire:
 * read the slot keys (one range), try to create a free one (picked at random, so that woken waiters spread over
 * the free slots), and when none is free wait for a delete under the prefix newer than the range's revision. Each
 * worker keeps one prefix watch open from before its first acquire, so no delete falls between a read and the
 * wait. No queue: every waiter wakes on every release (a herd), and nothing orders the waiters. Release deletes
 * the slot key if it is still the one we created.
 */

import { connectEtcd } from '../etcd/client.mjs';
import { now, packageVersion } from '../lib/index.mjs';

const PREFIX = 'dlock-bench-raw-sem/';
const REQUEST_MS = 5000;

export function etcdRecipeSubject({ baseline = true } = {}) {
  return {
    key: 'raw-etcd',
    name: 'raw etcd recipe',
    version: `etcd3 ${packageVersion('etcd3')}`,
    baseline,
    config:
      'range of the slot keys → txn create-if-absent (CreateRevision = 0) of a free one under a lease per worker ' +
      '(10 s, kept alive by etcd3); full: wait for a delete on a prefix watch; release: txn delete if CreateRevision = ours',
    async open() {
      const { client, countRequests } = connectEtcd();
      const lease = client.lease(10);
      lease.on('lost', () => {});
      let leaseId;
      try {
        leaseId = await lease.grant();
      } catch (error) {
        client.close();
        throw error;
      }
      let watcher;
      let lastDelete = 0n;
      const sleepers = new Set();

      /** Resolves true once a delete newer than `revision` has been seen; false at the deadline or on abort. */
      const deleteAfter = (revision, deadline, signal) =>
        new Promise((resolve) => {
          const check = () => {
            if (lastDelete > revision) return finish(true);
            if (signal?.aborted || now() >= deadline) return finish(false);
          };
          const timer = setTimeout(check, Math.max(0, deadline - now()));
          function finish(value) {
            clearTimeout(timer);
            sleepers.delete(check);
            signal?.removeEventListener('abort', check);
            resolve(value);
          }
          sleepers.add(check);
          signal?.addEventListener('abort', check, { once: true });
          check();
        });

      const txn = (request) => client.kv.txn(request, { deadline: Date.now() + REQUEST_MS });

      return {
        requests: () => countRequests(),
        async prepare(name) {
          watcher = await client.watch().prefix(`${PREFIX}${name}/`).create();
          watcher.on('error', () => {});
          watcher.on('delete', (kv) => {
            const revision = BigInt(kv.mod_revision);
            if (revision > lastDelete) lastDelete = revision;
            for (const check of [...sleepers]) check();
          });
        },
        async acquire(name, { permits, waitMs, signal }) {
          const dir = `${PREFIX}${name}/`;
          const deadline = now() + waitMs;
          for (;;) {
            const read = await client.kv.range(
              { key: Buffer.from(dir), range_end: Buffer.from(`${dir.slice(0, -1)}0`), keys_only: true },
              { deadline: Date.now() + REQUEST_MS },
            );
            const taken = new Set(read.kvs.map((kv) => kv.key.toString('utf8').slice(dir.length)));
            const free = [];
            for (let slot = 0; slot < permits; slot++) if (!taken.has(String(slot))) free.push(slot);
            if (free.length) {
              const slot = free[Math.floor(Math.random() * free.length)];
              const key = Buffer.from(`${dir}${slot}`);
              const created = await txn({
                compare: [{ key, target: 'Create', result: 'Equal', create_revision: '0' }],
                success: [{ request_put: { key, value: Buffer.alloc(0), lease: leaseId } }],
              });
              if (created.succeeded) {
                const revision = created.header.revision;
                return {
                  slot,
                  token: BigInt(revision),
                  release: () =>
                    txn({
                      compare: [{ key, target: 'Create', result: 'Equal', create_revision: revision }],
                      success: [{ request_delete_range: { key } }],
                    }),
                };
              }
              if (signal?.aborted || now() >= deadline) return null;
              continue; // another waiter took it first: read again
            }
            if (!(await deleteAfter(BigInt(read.header.revision), deadline, signal))) return null;
          }
        },
        async close() {
          await watcher?.cancel().catch(() => {});
          await lease.revoke().catch(() => {});
          client.close();
        },
      };
    },
  };
}
