import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { lockParentPath } from '../src/index.js';
import { childrenOf, connectedClient, countingClient, statOf } from './helpers.js';
import { aclOf, CUSTOM_ACL, call, DATA, dataOf, useParentNodes } from './parent-nodes.js';

// A try that does not wait deletes and re-creates the lock's parent (cd9287b); these check what that must keep.

const ROOT = '/dlock-test/try-parent';
const TTL = 10_000;
const { like, raw, locks, lockClient, closeAfter } = useParentNodes(ROOT, [ROOT]);

describe("a try that does not wait keeps a lock parent's data and ACL", () => {
  it('keeps the data of a parent created with data, and takes the free lock', async () => {
    const client = lockClient();
    const name = uniqueName('created-with-data');
    const parent = lockParentPath(ROOT, name);
    await call((cb) => raw.create(parent, DATA, 0, cb));
    for (let i = 0; i < 3; i++) {
      const handle = await client.tryAcquire(name, { ttlMs: TTL });
      expect(handle).not.toBeNull();
      await handle?.release();
    }
    expect(await dataOf(raw, parent)).toEqual(DATA);
  });

  it('keeps data written to a parent after the service made it (the delete is at the version it saw)', async () => {
    const client = lockClient();
    const name = uniqueName('set-data');
    const parent = lockParentPath(ROOT, name);
    await (await client.acquire(name, { ttlMs: TTL, waitMs: 0 }))?.release(); // the multi makes the parent
    await call((cb) => raw.setData(parent, DATA, -1, cb));
    for (let i = 0; i < 3; i++) {
      const handle = await client.tryAcquire(name, { ttlMs: TTL });
      expect(handle).not.toBeNull();
      await handle?.release();
    }
    expect(await dataOf(raw, parent)).toEqual(DATA);
    expect(await childrenOf(like, parent)).toEqual([]);
  });

  it('keeps the ACL of a parent created with one other than the open ACL', async () => {
    const client = lockClient();
    const name = uniqueName('custom-acl');
    const parent = lockParentPath(ROOT, name);
    await call((cb) => raw.create(parent, Buffer.alloc(0), CUSTOM_ACL, 0, cb));
    const before = await aclOf(raw, parent);
    expect(before).toHaveLength(2);
    for (let i = 0; i < 3; i++) {
      const handle = await client.tryAcquire(name, { ttlMs: TTL });
      expect(handle).not.toBeNull();
      await handle?.release();
    }
    expect(await aclOf(raw, parent)).toEqual(before);
  });

  it('keeps an ACL set on a parent a try made once its data was written too (the version moves)', async () => {
    const client = lockClient();
    const name = uniqueName('set-acl');
    const parent = lockParentPath(ROOT, name);
    await (await client.acquire(name, { ttlMs: TTL, waitMs: 0 }))?.release(); // the multi makes the parent
    await call((cb) => raw.setACL(parent, CUSTOM_ACL, -1, cb));
    await call((cb) => raw.setData(parent, Buffer.alloc(0), -1, cb));
    const before = await aclOf(raw, parent);
    for (let i = 0; i < 3; i++) {
      const handle = await client.tryAcquire(name, { ttlMs: TTL });
      expect(handle).not.toBeNull();
      await handle?.release();
    }
    expect(await aclOf(raw, parent)).toEqual(before);
  });

  it('close() deletes the idle parents a try used only if they have no data and the open ACL', async () => {
    const { service, client } = locks();
    const names = {
      data: uniqueName('close-data'),
      acl: uniqueName('close-acl'),
      plain: uniqueName('close-plain'),
    };
    const withData = lockParentPath(ROOT, names.data);
    const withAcl = lockParentPath(ROOT, names.acl);
    await call((cb) => raw.create(withData, DATA, 0, cb));
    await call((cb) => raw.create(withAcl, Buffer.alloc(0), CUSTOM_ACL, 0, cb));
    for (const name of Object.values(names)) {
      const handle = await client.tryAcquire(name, { ttlMs: TTL });
      expect(handle).not.toBeNull();
      await handle?.release();
    }
    await client.close();
    await service.close();
    expect(await dataOf(raw, withData)).toEqual(DATA);
    expect(await aclOf(raw, withAcl)).toHaveLength(2);
    expect(await statOf(like, lockParentPath(ROOT, names.plain))).toBeNull();
  });

  it('a busy try costs 2 requests in a parent it has never seen, made by a try or not', async () => {
    for (const madeBy of ['try', 'create'] as const) {
      const name = uniqueName(`first-${madeBy}`);
      const parent = lockParentPath(ROOT, name);
      if (madeBy === 'create') await call((cb) => raw.create(parent, Buffer.alloc(0), 0, cb));
      const holder = await lockClient().acquire(name, { ttlMs: TTL, waitMs: 0 });
      const counted = countingClient(await connectedClient(ZK_CONNECT));
      closeAfter(counted);
      const { client } = locks({ client: counted });
      // Another name first: the session is open, and the probe of the client's transaction (counted as a request
      // by countingClient, though none is sent) is done.
      await (await client.tryAcquire(uniqueName('warm'), { ttlMs: TTL }))?.release();
      const before = counted.counts.requests;
      expect(await client.tryAcquire(name, { ttlMs: TTL })).toBeNull();
      // The parent's read (getACL: it has children) and the listing; no multi.
      expect(counted.counts.requests - before).toBe(2);
      expect(await childrenOf(like, parent)).toHaveLength(1);
      await holder.release();
    }
  });

  it('still deletes and re-creates a plain parent it did not make: a busy try writes nothing there', async () => {
    const client = lockClient();
    const name = uniqueName('plain');
    const parent = lockParentPath(ROOT, name);
    await call((cb) => raw.create(parent, Buffer.alloc(0), 0, cb));
    const holder = await lockClient().acquire(name, { ttlMs: TTL });
    const stat = await statOf(like, parent);
    for (let i = 0; i < 3; i++) expect(await client.tryAcquire(name, { ttlMs: TTL })).toBeNull();
    const after = await statOf(like, parent);
    // Neither re-created (czxid) nor any child created and deleted under it (pzxid).
    expect(after?.czxid).toEqual(stat?.czxid);
    expect(after?.pzxid).toEqual(stat?.pzxid);
    await holder.release();
    const czxid = (await statOf(like, parent))?.czxid;
    const handle = await client.tryAcquire(name, { ttlMs: TTL });
    expect(handle).not.toBeNull();
    // Free and plain: taken by the multi, which made the parent anew.
    expect((await statOf(like, parent))?.czxid).not.toEqual(czxid);
    await handle?.release();
  });
});
