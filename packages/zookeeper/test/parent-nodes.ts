import { createRequire } from 'node:module';
import { LockClient } from '@dlock/core';
import { ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, beforeAll } from 'vitest';
import { type ZooKeeperAclLike, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { connecting, zookeeper } from './helpers.js';

// What someone else may do to a parent in dlock's prefix (data at create, setData, ACLs), for the tests that check
// a try, a take or a sweep keeps it, and the set-up those test files share (useParentNodes).

/** node-zookeeper-client's calls that the adapter's structural type leaves out: ACLs, and data at create. */
export interface RawClient {
  create(
    path: string,
    data: Buffer,
    acls: readonly object[],
    mode: number,
    cb: (error: unknown) => void,
  ): void;
  create(path: string, data: Buffer, mode: number, cb: (error: unknown) => void): void;
  setData(path: string, data: Buffer, version: number, cb: (error: unknown) => void): void;
  getData(path: string, cb: (error: unknown, data: Buffer | undefined) => void): void;
  getACL(path: string, cb: (error: unknown, acls: readonly ZooKeeperAclLike[] | undefined) => void): void;
  setACL(path: string, acls: readonly object[], version: number, cb: (error: unknown) => void): void;
  close(): void;
}

interface ZooKeeperAclModule {
  ACL: new (permission: number, id: object) => object;
  Id: new (scheme: string, id: string) => object;
  Permission: { ALL: number; READ: number };
}

const zk = createRequire(import.meta.url)('node-zookeeper-client') as ZooKeeperAclModule;

export const DATA = Buffer.from('kept by someone else');
/** Open to all, as dlock needs, and read for one address besides: not the ACL dlock would create. */
export const CUSTOM_ACL = [
  new zk.ACL(zk.Permission.ALL, new zk.Id('world', 'anyone')),
  new zk.ACL(zk.Permission.READ, new zk.Id('ip', '10.0.0.1')),
];

export function rawOf(client: ZooKeeperClientLike): RawClient {
  return client as unknown as RawClient;
}

export function call(fn: (cb: (error: unknown) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => fn((error) => (error ? reject(error) : resolve())));
}

export function dataOf(raw: RawClient, path: string): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) =>
    raw.getData(path, (error, data) => (error ? reject(error) : resolve(data))),
  );
}

export function aclOf(
  raw: RawClient,
  path: string,
): Promise<{ scheme: string; id: string; permission: number }[]> {
  return new Promise((resolve, reject) =>
    raw.getACL(path, (error, acls) =>
      error
        ? reject(error)
        : resolve((acls ?? []).map((a) => ({ scheme: a.id.scheme, id: a.id.id, permission: a.permission }))),
    ),
  );
}

/** Creates the nodes of `path` that are missing, empty and open. */
export async function makePath(raw: RawClient, path: string): Promise<void> {
  const segments = path.slice(1).split('/');
  for (let i = 1; i <= segments.length; i++) {
    await call((cb) => raw.create(`/${segments.slice(0, i).join('/')}`, Buffer.alloc(0), 0, cb)).catch(
      () => undefined,
    );
  }
}

/** A service's options in these tests: on its own client (`connectionString`) unless `client` is given. */
export interface ParentTestOptions {
  readonly keyPrefix?: string;
  readonly idleParentMs?: number;
  readonly client?: ZooKeeperClientLike;
}

export interface ParentNodes {
  /** The file's raw client (connected before its tests), as the adapter's structural type, for reads. */
  readonly like: ZooKeeperClientLike;
  /** The same client, for what someone else does to a parent: data at create, setData, ACLs. */
  readonly raw: RawClient;
  /** A service under the file's prefix (or `keyPrefix`) and a LockClient on it, both closed after the file's tests. */
  locks(options?: ParentTestOptions): { readonly service: ZooKeeperLockService; readonly client: LockClient };
  /** The LockClient of {@link ParentNodes.locks}. */
  lockClient(options?: ParentTestOptions): LockClient;
  /** Closed after the file's tests, last first, before the raw client. */
  closeAfter(...items: { close(): unknown }[]): void;
}

/**
 * The set-up of a test file about parents: one raw client, connected before the file's tests with `paths` made (empty
 * and open), and closed after them, once every service, LockClient and client given to `closeAfter` is closed.
 */
export function useParentNodes(prefix: string, paths: readonly string[]): ParentNodes {
  const like = zookeeper.createClient(ZK_CONNECT, { sessionTimeout: 10_000, spinDelay: 100 });
  const raw = rawOf(like);
  const toClose: { close(): unknown }[] = [];
  beforeAll(async () => {
    await connecting(like, ZK_CONNECT);
    for (const path of paths) await makePath(raw, path);
  });
  afterAll(async () => {
    for (const item of toClose.splice(0).reverse()) await item.close();
    raw.close();
  });
  const closeAfter = (...items: { close(): unknown }[]): void => {
    toClose.push(...items);
  };
  const locks = (options: ParentTestOptions = {}) => {
    const { client: given, keyPrefix = prefix, idleParentMs } = options;
    const timing = idleParentMs === undefined ? {} : { idleParentMs };
    const service = given
      ? new ZooKeeperLockService({ client: given, keyPrefix, ...timing })
      : new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix, ...timing });
    const client = new LockClient(service);
    closeAfter(client, service);
    return { service, client };
  };
  return { like, raw, locks, lockClient: (options) => locks(options).client, closeAfter };
}
