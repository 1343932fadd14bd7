/**
 * The ZooKeeper server under test, connected clients, and the counting wrapper both subjects run on:
 *
 *   ZK_CONNECT                   DLOCK_BENCH_ZK_CONNECT, default 127.0.0.1:2181
 *   serverVersion()              from the `srvr` four-letter command
 *   connectZooKeeper(timeoutMs)  a connected node-zookeeper-client (bounded connect)
 *   counted(client)              the same client, counting the requests this process sends through it and the
 *                                watch notifications it delivers, per parent node of the watched path
 */
import { createRequire } from 'node:module';
import net from 'node:net';
import { ENDPOINTS, now } from '../lib/index.mjs';

export const zookeeper = createRequire(import.meta.url)('node-zookeeper-client');
export const ZK_CONNECT = ENDPOINTS.zookeeper;

export function serverVersion() {
  const [host, port] = ZK_CONNECT.split(',')[0].split('/')[0].split(':');
  return new Promise((resolve) => {
    const socket = net.connect({ host, port: Number(port || 2181) });
    let reply = '';
    const done = () => {
      socket.destroy();
      resolve(/Zookeeper version: ([^,\s-]+)/.exec(reply)?.[1] ?? 'unknown');
    };
    socket.setTimeout(2000, done);
    socket.on('data', (chunk) => {
      reply += chunk;
    });
    socket.once('end', done);
    socket.once('error', done);
    socket.once('connect', () => socket.write('srvr'));
  });
}

export function connectZooKeeper(sessionTimeout = 10_000, timeoutMs = 10_000) {
  const client = zookeeper.createClient(ZK_CONNECT, { sessionTimeout, spinDelay: 200 });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.close();
      reject(new Error(`no ZooKeeper session at ${ZK_CONNECT} within ${timeoutMs} ms`));
    }, timeoutMs);
    client.once('connected', () => {
      clearTimeout(timer);
      resolve(client);
    });
    client.connect();
  });
}

const parentOf = (path) => path.slice(0, path.lastIndexOf('/'));

/**
 * A structural stand-in for the client that counts. It forwards `connectionManager` so that code reading the
 * client's internals (the adapter's guarded reads) sees the real one.
 */
export function counted(client) {
  const stats = { requests: 0, notifications: new Map() };
  const noticed = (path) => {
    const parent = parentOf(path);
    let list = stats.notifications.get(parent);
    if (!list) {
      list = [];
      stats.notifications.set(parent, list);
    }
    list.push(now());
  };
  const watching = (path, watcher) => (event) => {
    noticed(path);
    watcher(event);
  };
  // The client dedupes watchers by identity per path: keep one wrapper per (watcher, path).
  const wrappers = new WeakMap();
  const wrap = (path, watcher) => {
    let byPath = wrappers.get(watcher);
    if (!byPath) {
      byPath = new Map();
      wrappers.set(watcher, byPath);
    }
    let wrapped = byPath.get(path);
    if (!wrapped) {
      wrapped = watching(path, watcher);
      byPath.set(path, wrapped);
    }
    return wrapped;
  };
  const withWatcher = (method) => (path, a, b) => {
    stats.requests += 1;
    // getData(path, undefined, callback) reads without a watch: nothing to wrap.
    if (typeof b === 'function') return client[method](path, typeof a === 'function' ? wrap(path, a) : a, b);
    return client[method](path, a);
  };
  return {
    stats,
    get connectionManager() {
      return client.connectionManager;
    },
    connect: () => client.connect(),
    close: () => client.close(),
    getState: () => client.getState(),
    getSessionId: () => client.getSessionId(),
    getSessionTimeout: () => client.getSessionTimeout(),
    create: (...args) => {
      stats.requests += 1;
      return client.create(...args);
    },
    remove: (...args) => {
      stats.requests += 1;
      return client.remove(...args);
    },
    exists: withWatcher('exists'),
    getData: withWatcher('getData'),
    getChildren: withWatcher('getChildren'),
    transaction: () => {
      stats.requests += 1;
      return client.transaction();
    },
    mkdirp: (path, callback) => {
      stats.requests += path.split('/').length - 1;
      return client.mkdirp(path, callback);
    },
    on: (event, listener) => client.on(event, listener),
    once: (event, listener) => client.once(event, listener),
    removeListener: (event, listener) => client.removeListener(event, listener),
  };
}
