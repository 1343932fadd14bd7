import { type ChildProcess, fork } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { ZooKeeperClientLike, ZooKeeperStatLike, ZooKeeperWatcher } from '../src/index.js';

interface ZooKeeperModule {
  createClient(connect: string, options: { sessionTimeout: number; spinDelay?: number }): ZooKeeperClientLike;
}

export const zookeeper = createRequire(import.meta.url)('node-zookeeper-client') as ZooKeeperModule;

/** A connected node-zookeeper-client; the test closes it. */
export async function connectedClient(
  connect: string,
  sessionTimeout = 10_000,
): Promise<ZooKeeperClientLike> {
  const client = zookeeper.createClient(connect, { sessionTimeout, spinDelay: 100 });
  await connecting(client, connect);
  return client;
}

/** Connects a client made with `zookeeper.createClient`, resolving once it is connected (within 10 s). */
export function connecting(client: ZooKeeperClientLike, connect: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ZooKeeper at ${connect}`)), 10_000);
    client.on('state', (state) => {
      if (state.code === 3) {
        clearTimeout(timer);
        resolve();
      }
    });
    client.connect();
  });
}

function call<T>(fn: (cb: (error: Error | null | undefined, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value))));
}

/** The children of a node, [] if it does not exist. */
export async function childrenOf(client: ZooKeeperClientLike, path: string): Promise<string[]> {
  try {
    return await call<string[]>((cb) => client.getChildren(path, cb));
  } catch (error) {
    if ((error as { code?: number }).code === -101) return [];
    throw error;
  }
}

export function statOf(client: ZooKeeperClientLike, path: string): Promise<ZooKeeperStatLike | null> {
  return call<ZooKeeperStatLike | null>((cb) => client.exists(path, cb));
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  maxMs: number,
  stepMs = 20,
): Promise<boolean> {
  const end = Date.now() + maxMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() > end) return false;
    await sleep(stepMs);
  }
}

/** What a {@link CountingClient} saw. */
export interface Counts {
  /** Watch notifications delivered (each wakes one waiter). */
  notifications: number;
  getChildren: number;
  requests: number;
}

/**
 * Delegates to a real client and counts what the adapter asks of it. The `connectionManager` is passed through so
 * the adapter's guarded reads of it behave as with the bare client.
 */
export function countingClient(
  inner: ZooKeeperClientLike,
): ZooKeeperClientLike & { readonly counts: Counts } {
  const counts: Counts = { notifications: 0, getChildren: 0, requests: 0 };
  const wrap = (watcher: ZooKeeperWatcher): ZooKeeperWatcher => {
    const known = wrapped.get(watcher);
    if (known) return known;
    const counted: ZooKeeperWatcher = (event) => {
      counts.notifications += 1;
      watcher(event);
    };
    wrapped.set(watcher, counted);
    return counted;
  };
  const wrapped = new WeakMap<ZooKeeperWatcher, ZooKeeperWatcher>();
  const client = {
    counts,
    get connectionManager(): unknown {
      return Reflect.get(inner, 'connectionManager');
    },
    connect: () => inner.connect(),
    close: () => inner.close(),
    getState: () => inner.getState(),
    getSessionId: () => inner.getSessionId(),
    getSessionTimeout: () => inner.getSessionTimeout(),
    create: (...args: Parameters<ZooKeeperClientLike['create']>) => {
      counts.requests += 1;
      inner.create(...args);
    },
    remove: (...args: Parameters<ZooKeeperClientLike['remove']>) => {
      counts.requests += 1;
      inner.remove(...args);
    },
    exists: (path: string, a: unknown, b?: unknown) => {
      counts.requests += 1;
      if (b === undefined) inner.exists(path, a as Parameters<ZooKeeperClientLike['getChildren']>[1]);
      else inner.exists(path, wrap(a as ZooKeeperWatcher), b as Parameters<ZooKeeperClientLike['exists']>[1]);
    },
    getACL: (...args: Parameters<ZooKeeperClientLike['getACL']>) => {
      counts.requests += 1;
      inner.getACL(...args);
    },
    getData: (...args: Parameters<ZooKeeperClientLike['getData']>) => {
      counts.requests += 1;
      const watcher = args[1];
      inner.getData(args[0], watcher === undefined ? undefined : wrap(watcher), args[2]);
    },
    setData: (
      path: string,
      data: Buffer,
      version: number,
      callback: (error: unknown, stat: unknown) => void,
    ) => {
      counts.requests += 1;
      (inner.setData as NonNullable<ZooKeeperClientLike['setData']>)(path, data, version, callback);
    },
    getChildren: (path: string, a: unknown, b?: unknown) => {
      counts.requests += 1;
      counts.getChildren += 1;
      if (b === undefined) inner.getChildren(path, a as Parameters<ZooKeeperClientLike['getChildren']>[1]);
      else
        inner.getChildren(
          path,
          wrap(a as ZooKeeperWatcher),
          b as Parameters<ZooKeeperClientLike['getChildren']>[1],
        );
    },
    transaction: () => {
      counts.requests += 1;
      return inner.transaction();
    },
    on: (event: 'state', listener: Parameters<ZooKeeperClientLike['on']>[1]) => inner.on(event, listener),
    removeListener: (event: 'state', listener: Parameters<ZooKeeperClientLike['on']>[1]) =>
      inner.removeListener(event, listener),
  };
  return client as unknown as ZooKeeperClientLike & { readonly counts: Counts };
}

interface Described {
  readonly name?: string;
  readonly code?: string;
  readonly reason?: string;
  readonly message: string;
}

/** What `fixtures/holder.mjs` reports over IPC. */
export interface HolderMessage {
  readonly type: 'acquired' | 'released' | 'error';
  readonly token?: string;
  readonly session?: string;
  readonly wokeAt?: number;
  readonly outcome?:
    | { readonly settled: 'resolved'; readonly value: unknown }
    | { readonly settled: 'rejected'; readonly error: Described };
  readonly state?: string | null;
  readonly lost?: readonly string[];
  readonly error?: Described;
}

export interface Holder {
  readonly child: ChildProcess;
  /** The first message of `type`; rejects if the holder reported an error or sent nothing in time. */
  next(type: HolderMessage['type'], ms: number): Promise<HolderMessage>;
  /** Lets it close and exit, or kills it; resolves once it is gone. */
  stop(): Promise<void>;
}

/**
 * A lock holder in a child process running the BUILT package (`fixtures/holder.mjs`), acquiring `name` at once:
 * something a test can freeze, or kill, with the whole process.
 */
export function forkHolder(
  connect: string,
  root: string,
  name: string,
  mode: 'client' | 'service',
  sessionTimeoutMs: number,
): Holder {
  const child = fork(
    fileURLToPath(new URL('./fixtures/holder.mjs', import.meta.url)),
    [connect, root, name, mode, String(sessionTimeoutMs)],
    { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const messages: HolderMessage[] = [];
  child.on('message', (m: HolderMessage) => messages.push(m));
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    async next(type, ms) {
      const end = Date.now() + ms;
      for (;;) {
        const found = messages.find((m) => m.type === type || m.type === 'error');
        if (found?.type === 'error') throw new Error(`holder failed: ${JSON.stringify(found.error)}`);
        if (found) return found;
        if (Date.now() > end || gone()) throw new Error(`no "${type}" from the holder within ${ms} ms`);
        await sleep(20);
      }
    },
    async stop() {
      if (gone()) return;
      child.kill('SIGCONT');
      if (child.connected) child.send('exit');
      await Promise.race([exited, sleep(5_000)]);
      if (!gone()) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Whether `client` is connected (SyncConnected) under the session `sessionId` again within `timeoutMs`. */
export function reconnectedUnder(
  client: ZooKeeperClientLike,
  sessionId: string | undefined,
  timeoutMs = 10_000,
): Promise<boolean> {
  return waitFor(
    () => client.getState().code === 3 && client.getSessionId().toString('hex') === sessionId,
    timeoutMs,
    50,
  );
}
