/**
 * The semaphore a ZooKeeper user writes by hand on node-zookeeper-client, shaped like Curator's
 * InterProcessSemaphoreV2: under `<name>/` a lock recipe in `locks/` (ephemeral sequential nodes, the lowest
 * holds, the others wait on the node just before theirs) and lease nodes in `leases/`. To acquire: take the
 * internal lock, create an ephemeral sequential lease node, list `leases/` with a children watch and wait on it
 * until at most N lease nodes are there, then give up the internal lock. The internal lock queues the waiters in
 * arrival order, and only its holder watches the leases. Release deletes the lease node. Leases live with the
 * session; there are no slots, so no slot number or token to check.
 */
import { now, packageVersion } from '../lib/index.mjs';
import { connectZooKeeper, counted, zookeeper } from '../zookeeper/client.mjs';

const ROOT = '/dlock-bench/raw-semaphores';
const { CreateMode, Exception } = zookeeper;

const call = (fn) =>
  new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value))));
const sequence = (node) => Number(node.slice(-10));
const byName = (path) => path.slice(path.lastIndexOf('/') + 1);

export function zooKeeperRecipeSubject({ baseline = true } = {}) {
  return {
    key: 'raw-zookeeper',
    name: 'raw Curator-style recipe',
    version: `node-zookeeper-client ${packageVersion('node-zookeeper-client')}`,
    baseline,
    config:
      'InterProcessSemaphoreV2 shape: internal lock (ephemeral sequential in locks/, wait on the predecessor) → ' +
      'ephemeral sequential lease node → getChildren(leases/) with a watch until ≤ N → delete the lock node; ' +
      'release deletes the lease node; a session (10 s) per worker',
    async open() {
      const client = counted(await connectZooKeeper(10_000));

      /** Resolves true when `watch` fires, false at the deadline or on abort. */
      const until = (fired, deadline, signal) =>
        new Promise((resolve) => {
          const finish = (value) => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', abort);
            resolve(value);
          };
          const abort = () => finish(false);
          const timer = setTimeout(abort, Math.max(0, deadline - now()));
          signal?.addEventListener('abort', abort, { once: true });
          fired.then(() => finish(true));
        });

      /** A fresh watcher per call: the client keeps one watcher per identity and path. */
      const watched = () => {
        let fire;
        const fired = new Promise((resolve) => {
          fire = resolve;
        });
        return { watcher: () => fire(), fired };
      };

      /** Waits for the internal lock: true once `node` is the lowest in `dir`. */
      const lockTurn = async (dir, node, deadline, signal) => {
        for (;;) {
          const children = (await call((cb) => client.getChildren(dir, cb))).sort(
            (a, b) => sequence(a) - sequence(b),
          );
          const index = children.indexOf(node);
          if (index === 0) return true;
          if (index < 0) throw new Error(`the lock node ${node} is gone`);
          if (signal?.aborted || now() >= deadline) return false;
          const { watcher, fired } = watched();
          const exists = await call((cb) => client.exists(`${dir}/${children[index - 1]}`, watcher, cb));
          if (exists && !(await until(fired, deadline, signal))) return false;
        }
      };

      const remove = (path) =>
        call((cb) => client.remove(path, -1, cb)).catch((error) => {
          if (error.getCode?.() !== Exception.NO_NODE) throw error;
        });

      return {
        requests: async () => client.stats.requests,
        async prepare(name) {
          for (const dir of ['locks', 'leases'])
            await call((cb) => client.mkdirp(`${ROOT}/${name}/${dir}`, cb));
        },
        async acquire(name, { permits, waitMs, signal }) {
          const base = `${ROOT}/${name}`;
          const deadline = now() + waitMs;
          const lockPath = await call((cb) =>
            client.create(`${base}/locks/lock-`, CreateMode.EPHEMERAL_SEQUENTIAL, cb),
          );
          let leasePath;
          try {
            if (!(await lockTurn(`${base}/locks`, byName(lockPath), deadline, signal))) return null;
            leasePath = await call((cb) =>
              client.create(`${base}/leases/lease-`, CreateMode.EPHEMERAL_SEQUENTIAL, cb),
            );
            for (;;) {
              const { watcher, fired } = watched();
              const leases = await call((cb) => client.getChildren(`${base}/leases`, watcher, cb));
              if (!leases.includes(byName(leasePath))) throw new Error(`the lease node ${leasePath} is gone`);
              if (leases.length <= permits) {
                const held = leasePath;
                leasePath = undefined;
                return { release: () => remove(held) };
              }
              if (!(await until(fired, deadline, signal))) return null;
            }
          } finally {
            if (leasePath) await remove(leasePath).catch(() => {});
            await remove(lockPath).catch(() => {});
          }
        },
        async close() {
          client.close();
        },
      };
    },
  };
}
