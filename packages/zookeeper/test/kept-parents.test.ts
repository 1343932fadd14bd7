import type { LockClient } from '@dlock/core';
import { uniqueName } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { lockParentPath } from '../src/index.js';
import { permitQueuePath, permitSlotsPath, semaphorePath } from '../src/keys.js';
import { childrenOf, statOf, waitFor } from './helpers.js';
import { aclOf, CUSTOM_ACL, call, DATA, dataOf, useParentNodes } from './parent-nodes.js';

// The semaphore's free-slot take deletes and re-creates its queue parent, and the sweep deletes parents other
// processes left: both must keep (or leave) a parent with data or another ACL, as a lock's try does (192e4cb).

const ROOT = '/dlock-test/kept-parents';
const SWEPT_ROOT = '/dlock-test/kept-parents-swept';
const TTL = 10_000;
const PERMITS = 2;
const { like, raw, locks, lockClient } = useParentNodes(ROOT, [`${ROOT}/.semaphores`, SWEPT_ROOT]);

/** The semaphore's node and its two parents, made by someone else; the queue parent with `data` or `acls`. */
async function makeSemaphore(
  name: string,
  queue: { data?: Buffer; acls?: readonly object[] },
): Promise<string> {
  const semaphore = semaphorePath(ROOT, name);
  const parent = permitQueuePath(semaphore, PERMITS);
  await call((cb) => raw.create(semaphore, Buffer.alloc(0), 0, cb));
  const data = queue.data ?? Buffer.alloc(0);
  if (queue.acls) await call((cb) => raw.create(parent, data, queue.acls as object[], 0, cb));
  else await call((cb) => raw.create(parent, data, 0, cb));
  await call((cb) => raw.create(permitSlotsPath(semaphore, PERMITS), Buffer.alloc(0), 0, cb));
  return parent;
}

/** Takes and gives back a permit three times, each at once (the free-slot take). */
async function takeFreeSlots(client: LockClient, name: string): Promise<void> {
  const pool = client.semaphore(name, { permits: PERMITS, ttlMs: TTL });
  for (let i = 0; i < 3; i++) {
    const permit = await pool.tryAcquire();
    expect(permit).not.toBeNull();
    await permit?.release();
  }
}

describe("a semaphore's free-slot take keeps its queue parent's data and ACL", () => {
  it('keeps the data of a queue parent created with data', async () => {
    const name = uniqueName('sem-created-with-data');
    const parent = await makeSemaphore(name, { data: DATA });
    await takeFreeSlots(lockClient(), name);
    expect(await dataOf(raw, parent)).toEqual(DATA);
  });

  it('keeps data written to a queue parent after the service made it', async () => {
    const client = lockClient();
    const name = uniqueName('sem-set-data');
    const parent = permitQueuePath(semaphorePath(ROOT, name), PERMITS);
    await takeFreeSlots(client, name); // sets the semaphore up
    await call((cb) => raw.setData(parent, DATA, -1, cb));
    await takeFreeSlots(client, name);
    expect(await dataOf(raw, parent)).toEqual(DATA);
    expect(await childrenOf(like, parent)).toEqual([]);
  });

  it('keeps the ACL of a queue parent created with one other than the open ACL', async () => {
    const name = uniqueName('sem-custom-acl');
    const parent = await makeSemaphore(name, { acls: CUSTOM_ACL });
    const before = await aclOf(raw, parent);
    expect(before).toHaveLength(2);
    await takeFreeSlots(lockClient(), name);
    expect(await aclOf(raw, parent)).toEqual(before);
  });

  it('in such a queue parent, a try still overtakes no waiter and leaves no node when every slot is held', async () => {
    const client = lockClient();
    const name = uniqueName('sem-kept-busy');
    const parent = await makeSemaphore(name, { data: DATA });
    const pool = client.semaphore(name, { permits: PERMITS, ttlMs: TTL });
    const held = [await pool.acquire(), await pool.acquire()];
    const waiter = pool.acquire({ waitMs: 30_000 });
    expect(await waitFor(async () => (await childrenOf(like, parent)).length === 1, 5_000)).toBe(true);
    await held[0]?.release();
    const next = await waiter;
    expect(await pool.tryAcquire()).toBeNull();
    expect(await childrenOf(like, parent)).toEqual([]);
    for (const permit of [held[1], next]) await permit?.release();
    expect(await dataOf(raw, parent)).toEqual(DATA);
  });
});

describe("a semaphore's idle delete (close(), idleParentMs, the sweep) keeps its nodes' data and ACL", () => {
  it('close() deletes a semaphore it used only if its nodes have no data and the open ACL', async () => {
    const { service, client } = locks();
    const names = {
      data: uniqueName('sem-close-data'),
      acl: uniqueName('sem-close-acl'),
      plain: uniqueName('sem-close-plain'),
    };
    const withData = await makeSemaphore(names.data, { data: DATA });
    const withAcl = await makeSemaphore(names.acl, { acls: CUSTOM_ACL });
    for (const name of Object.values(names)) await takeFreeSlots(client, name);
    await client.close();
    await service.close();
    expect(await dataOf(raw, withData)).toEqual(DATA);
    expect(await aclOf(raw, withAcl)).toHaveLength(2);
    expect(await statOf(like, semaphorePath(ROOT, names.plain))).toBeNull();
  });

  it('a plain queue parent at another version is made again at version 1, and deleted when idle', async () => {
    const { service, client } = locks();
    const name = uniqueName('sem-plain-version');
    const semaphore = semaphorePath(ROOT, name);
    const parent = permitQueuePath(semaphore, PERMITS);
    await takeFreeSlots(client, name);
    await call((cb) => raw.setData(parent, Buffer.alloc(0), -1, cb)); // version 2, still plain
    const czxid = (await statOf(like, parent))?.czxid;
    await takeFreeSlots(client, name);
    const after = await statOf(like, parent);
    expect(after?.czxid).not.toEqual(czxid);
    expect(after?.version).toBe(1);
    await client.close();
    await service.close();
    expect(await statOf(like, semaphore)).toBeNull();
  });
});

describe('the sweep of parents other processes left', () => {
  it('deletes an idle plain parent and leaves one with another ACL', { timeout: 30_000 }, async () => {
    const plain = lockParentPath(SWEPT_ROOT, uniqueName('swept-plain'));
    const withAcl = lockParentPath(SWEPT_ROOT, uniqueName('swept-acl'));
    await call((cb) => raw.create(plain, Buffer.alloc(0), 0, cb));
    await call((cb) => raw.create(withAcl, Buffer.alloc(0), CUSTOM_ACL, 0, cb));
    const client = lockClient({ keyPrefix: SWEPT_ROOT, idleParentMs: 300 });
    await (await client.acquire(uniqueName('warm'), { ttlMs: TTL }))?.release(); // a session: the sweep runs
    expect(await waitFor(async () => (await statOf(like, plain)) === null, 20_000, 100)).toBe(true);
    // Seen idle on the same passes as the plain one: given one more pass (1 to 1.5 s), it is still there.
    expect(await waitFor(async () => (await statOf(like, withAcl)) === null, 2_000, 100)).toBe(false);
    expect(await aclOf(raw, withAcl)).toHaveLength(2);
  });
});
