/**
 * The floor: the lock recipe of the ZooKeeper documentation written straight on node-zookeeper-client, one request
 * after the other: create an ephemeral sequential node, list the parent's children, and hold if ours is lowest;
 * otherwise watch the node just before ours (getData) and list again when it goes. Release deletes the node. No
 * deadlines, no protected names, no session checks: what a hand-written recipe usually is. Its locks live as long
 * as the session, so scenario C needs no renewal traffic at all.
 */
import { now, packageVersion } from '../lib/index.mjs';
import { connectZooKeeper, counted, zookeeper } from './client.mjs';

const ROOT = '/dlock-bench/raw';
const { CreateMode, Exception } = zookeeper;

const call = (fn) =>
  new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value))));
const sequence = (node) => Number(node.slice(-10));

export function rawSubject({ tally }) {
  let client;
  const lostListeners = new Set();

  const createNode = async (parent) => {
    try {
      return await call((cb) => client.create(`${parent}/lock-`, CreateMode.EPHEMERAL_SEQUENTIAL, cb));
    } catch (error) {
      if (error.getCode?.() !== Exception.NO_NODE) throw error;
      await call((cb) => client.mkdirp(parent, cb));
      return call((cb) => client.create(`${parent}/lock-`, CreateMode.EPHEMERAL_SEQUENTIAL, cb));
    }
  };

  /** Resolves when the watch fires, `ms` pass or `signal` aborts. */
  const waitForNotice = (path, ms, signal) =>
    new Promise((resolve, reject) => {
      let timer;
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener('abort', done, { once: true });
      client.getData(path, done, (error) => {
        if (error?.getCode?.() === Exception.NO_NODE) done();
        else if (error) reject(error);
      });
    });

  const acquire = async (name, { waitMs, signal }) => {
    tally.started(name);
    const parent = `${ROOT}/${name}`;
    const path = await createNode(parent);
    const node = path.slice(parent.length + 1);
    const deadline = now() + waitMs;
    for (;;) {
      const children = (await call((cb) => client.getChildren(parent, cb))).sort(
        (a, b) => sequence(a) - sequence(b),
      );
      const index = children.indexOf(node);
      if (index === 0) {
        tally.granted(name, BigInt(sequence(node)));
        return {
          release: async () => {
            tally.released(name);
            await call((cb) => client.remove(path, -1, cb));
          },
        };
      }
      if (index < 0 || now() >= deadline || signal?.aborted) {
        await call((cb) => client.remove(path, -1, cb)).catch(() => {});
        return null;
      }
      await waitForNotice(`${parent}/${children[index - 1]}`, deadline - now(), signal);
    }
  };

  return {
    name: 'raw recipe',
    version: `node-zookeeper-client ${packageVersion('node-zookeeper-client')}`,
    baseline: true,
    config:
      'create EPHEMERAL_SEQUENTIAL → getChildren → (wait on the predecessor with getData) → delete; one request at a time',
    countRequests: async () => client.stats.requests,
    notifications: () => client?.stats.notifications ?? new Map(),
    async setup() {
      client = counted(await connectZooKeeper());
      // Every lock of the session goes when it expires: one listener for all of them.
      client.once('expired', () => {
        for (const onLost of lostListeners) onLost();
      });
    },
    acquire,
    async hold(name, { onLost }) {
      const held = await acquire(name, { waitMs: 0 });
      if (!held) throw new Error(`raw: ${name} is busy`);
      lostListeners.add(onLost);
      return {
        release: () => {
          lostListeners.delete(onLost);
          return held.release();
        },
      };
    },
    async close() {
      client?.close();
    },
  };
}
