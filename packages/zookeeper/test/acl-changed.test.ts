import type { LockClient } from '@dlock/core';
import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike } from '../src/index.js';
import { permitQueuePath, permitSlotsPath, semaphorePath, semaphoresRootPath } from '../src/keys.js';
import { childrenOf, connectedClient, countingClient, statOf, waitFor } from './helpers.js';
import { aclOf, CUSTOM_ACL, call, DATA, dataOf, makePath, useParentNodes } from './parent-nodes.js';

// setAcl moves a node's ACL version, never its data version, and a multi can check only the data version: a try
// or take that deleted a parent at the data version it expected lost an ACL someone set since.

const ROOT = '/dlock-test/acl-changed';
const SWEPT_ROOT = '/dlock-test/acl-changed-swept';
const TTL = 10_000;
const PERMITS = 2;
const { like, raw, locks, lockClient, closeAfter } = useParentNodes(ROOT, [
  `${ROOT}/.semaphores`,
  `${SWEPT_ROOT}/.semaphores`,
]);

async function tryThrice(client: LockClient, name: string): Promise<void> {
  for (let i = 0; i < 3; i++) {
    const handle = await client.tryAcquire(name, { ttlMs: TTL });
    expect(handle).not.toBeNull();
    await handle?.release();
  }
}

async function takeThrice(client: LockClient, name: string, permits = PERMITS): Promise<void> {
  const pool = client.semaphore(name, { permits, ttlMs: TTL });
  for (let i = 0; i < 3; i++) {
    const permit = await pool.tryAcquire();
    expect(permit).not.toBeNull();
    await permit?.release();
  }
}

describe('an ACL set (setAcl) on a parent a try or take made is kept', () => {
  it("a lock's try keeps it and still takes the free lock", async () => {
    const client = lockClient();
    const name = uniqueName('try-set-acl');
    const parent = lockParentPath(ROOT, name);
    await tryThrice(client, name); // the try makes the parent, at data version 1
    await call((cb) => raw.setACL(parent, CUSTOM_ACL, -1, cb));
    await tryThrice(client, name);
    expect(await aclOf(raw, parent)).toHaveLength(2);
    expect(await childrenOf(like, parent)).toEqual([]);
  });

  it("a lock's try keeps data written once to a parent the ordinary acquire made (data version 1 too)", async () => {
    const client = lockClient();
    const name = uniqueName('try-acquired-data');
    const parent = lockParentPath(ROOT, name);
    await (await client.acquire(name, { ttlMs: TTL, waitMs: 1_000 }))?.release(); // created at version 0
    await call((cb) => raw.setData(parent, DATA, -1, cb));
    await tryThrice(client, name);
    expect(await dataOf(raw, parent)).toEqual(DATA);
  });

  it("a semaphore's free-slot take keeps it", async () => {
    const client = lockClient();
    const name = uniqueName('take-set-acl');
    const parent = permitQueuePath(semaphorePath(ROOT, name), PERMITS);
    await takeThrice(client, name); // the take makes the queue parent, at data version 1
    await call((cb) => raw.setACL(parent, CUSTOM_ACL, -1, cb));
    await takeThrice(client, name);
    expect(await aclOf(raw, parent)).toHaveLength(2);
    expect(await childrenOf(like, parent)).toEqual([]);
  });

  it('requests: 3 per free try and release, 2 per busy try, 4 per permit take and release, 7 with a kept queue parent', async () => {
    const inner = await connectedClient(ZK_CONNECT);
    closeAfter({ close: () => inner.close() });
    const counted = countingClient(inner);
    const client = lockClient({ client: counted });
    const cost = async (run: () => Promise<void>, times = 1): Promise<number> => {
      const before = counted.counts.requests;
      await run();
      return (counted.counts.requests - before) / times;
    };
    const name = uniqueName('counts');
    await tryThrice(client, name); // the session, the parent, and the probe of the client's transaction
    // The parent's read, the multi, the release.
    expect(await cost(() => tryThrice(client, name), 3)).toBe(3);
    const held = await client.tryAcquire(name, { ttlMs: TTL });
    // The parent's read (it has a child) and its listing.
    expect(await cost(async () => expect(await client.tryAcquire(name, { ttlMs: TTL })).toBeNull())).toBe(2);
    await held?.release();
    const semaphore = uniqueName('counts-sem');
    await takeThrice(client, semaphore);
    // The slots' listing and the queue parent's read (one round trip), the multi, the release.
    expect(await cost(() => takeThrice(client, semaphore), 3)).toBe(4);
    await call((cb) =>
      raw.setACL(permitQueuePath(semaphorePath(ROOT, semaphore), PERMITS), CUSTOM_ACL, -1, cb),
    );
    // The same two reads, the queue node's create and listing, the slots' listing, the take, the release.
    expect(await cost(() => takeThrice(client, semaphore), 3)).toBe(7);
  });
});

describe('the sweep of parents other processes left', () => {
  it('leaves a lock parent a try made whose ACL was set since', { timeout: 30_000 }, async () => {
    const name = uniqueName('swept-set-acl');
    const parent = lockParentPath(SWEPT_ROOT, name);
    await tryThrice(lockClient({ keyPrefix: SWEPT_ROOT, idleParentMs: 60_000 }), name);
    await call((cb) => raw.setACL(parent, CUSTOM_ACL, -1, cb));
    const plain = lockParentPath(SWEPT_ROOT, uniqueName('swept-plain'));
    await call((cb) => raw.create(plain, Buffer.alloc(0), 0, cb));
    const client = lockClient({ keyPrefix: SWEPT_ROOT, idleParentMs: 300 });
    await (await client.acquire(uniqueName('warm'), { ttlMs: TTL }))?.release();
    expect(await waitFor(async () => (await statOf(like, plain)) === null, 20_000, 100)).toBe(true);
    expect(await waitFor(async () => (await statOf(like, parent)) === null, 2_000, 100)).toBe(false);
    expect(await aclOf(raw, parent)).toHaveLength(2);
  });
});

describe("a semaphore's limit switch", () => {
  it("keeps the old limit's queue parent with data and refuses the switch", async () => {
    const client = lockClient();
    const name = uniqueName('switch-data');
    const semaphore = semaphorePath(ROOT, name);
    await takeThrice(client, name, 2);
    await call((cb) => raw.setData(permitQueuePath(semaphore, 2), DATA, -1, cb));
    await expect(client.semaphore(name, { permits: 3, ttlMs: TTL }).tryAcquire()).rejects.toMatchObject({
      code: 'PERMITS_MISMATCH',
    });
    // Nor does it say the new limit's permits are free.
    await expect(client.semaphore(name, { permits: 3, ttlMs: TTL }).available()).rejects.toMatchObject({
      code: 'PERMITS_MISMATCH',
    });
    expect(await dataOf(raw, permitQueuePath(semaphore, 2))).toEqual(DATA);
    expect(await statOf(like, permitSlotsPath(semaphore, 2))).not.toBeNull();
  });

  it("keeps the old limit's queue parent with another ACL and refuses the switch", async () => {
    const client = lockClient();
    const name = uniqueName('switch-acl');
    const semaphore = semaphorePath(ROOT, name);
    await takeThrice(client, name, 2);
    await call((cb) => raw.setACL(permitQueuePath(semaphore, 2), CUSTOM_ACL, -1, cb));
    await expect(client.semaphore(name, { permits: 3, ttlMs: TTL }).tryAcquire()).rejects.toMatchObject({
      code: 'PERMITS_MISMATCH',
    });
    expect(await aclOf(raw, permitQueuePath(semaphore, 2))).toHaveLength(2);
  });

  it('still switches a plain idle semaphore', async () => {
    const client = lockClient();
    const name = uniqueName('switch-plain');
    const semaphore = semaphorePath(ROOT, name);
    await takeThrice(client, name, 2);
    await takeThrice(client, name, 3);
    expect((await childrenOf(like, semaphore)).sort()).toEqual(['queue-3', 'slots-3']);
  });
});

describe('the sweep reads a parent it keeps once', () => {
  /** A client that records every read it sends, as `<call> <path>`. */
  function recording(inner: ZooKeeperClientLike): { client: ZooKeeperClientLike; paths: string[] } {
    const paths: string[] = [];
    const client = new Proxy(inner, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property);
        if (typeof value !== 'function') return value;
        const bound = value.bind(target) as (...args: unknown[]) => unknown;
        if (property !== 'getACL' && property !== 'exists' && property !== 'getChildren') return bound;
        return (path: string, ...rest: unknown[]) => {
          paths.push(`${String(property)} ${path}`);
          return bound(path, ...rest);
        };
      },
    });
    return { client, paths };
  }

  it('a semaphore whose queue parent has data is read once, not on every pass', {
    timeout: 40_000,
  }, async () => {
    const prefix = `${SWEPT_ROOT}/${uniqueName('run')}`;
    await makePath(raw, semaphoresRootPath(prefix));
    const semaphore = semaphorePath(prefix, uniqueName('kept-sem'));
    await call((cb) => raw.create(semaphore, Buffer.alloc(0), 0, cb));
    await call((cb) => raw.create(permitQueuePath(semaphore, PERMITS), DATA, 0, cb));
    await call((cb) => raw.create(permitSlotsPath(semaphore, PERMITS), Buffer.alloc(0), 0, cb));
    const inner = await connectedClient(ZK_CONNECT);
    closeAfter({ close: () => inner.close() });
    const { client, paths } = recording(inner);
    const sweeping = locks({ client, keyPrefix: prefix, idleParentMs: 300 }).client;
    await (await sweeping.acquire(uniqueName('warm'), { ttlMs: TTL }))?.release(); // a session: the sweep runs
    const reads = () => paths.filter((read) => read.split(' ')[1]?.startsWith(semaphore)).length;
    const passes = () => paths.filter((read) => read === `getChildren ${semaphoresRootPath(prefix)}`).length;
    const judged = () => paths.includes(`getACL ${permitQueuePath(semaphore, PERMITS)}`);
    // Stamped on one pass, stamped again and read (getACL) on the next: kept.
    expect(await waitFor(async () => judged(), 20_000, 50)).toBe(true);
    const after = { reads: reads(), passes: passes() };
    expect(await waitFor(async () => passes() >= after.passes + 4, 20_000, 50)).toBe(true);
    expect(reads()).toBe(after.reads);
    expect(await dataOf(raw, permitQueuePath(semaphore, PERMITS))).toEqual(DATA);
  });
});
