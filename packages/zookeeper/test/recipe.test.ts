import { AcquireTimeoutError, LockClient, type LockHandle } from '@dlock/core';
import { rejection, startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { childrenOf, connectedClient, countingClient, statOf, waitFor } from './helpers.js';

const ROOT = '/dlock-test/recipe';
const TTL = 10_000;
let raw: ZooKeeperClientLike;
const toClose: { close(): unknown }[] = [];

beforeAll(async () => {
  raw = await connectedClient(ZK_CONNECT);
});

afterAll(async () => {
  for (const item of toClose.splice(0).reverse()) await item.close();
  raw.close();
});

function service(
  options: Partial<{ idleParentMs: number; requestTimeoutMs: number }> = {},
): ZooKeeperLockService {
  const s = new ZooKeeperLockService({ connectionString: ZK_CONNECT, root: ROOT, ...options });
  toClose.push(s);
  return s;
}

function lockClient(s: ZooKeeperLockService): LockClient {
  const client = new LockClient(s);
  toClose.push(client);
  return client;
}

const queueOf = (name: string): Promise<string[]> => childrenOf(raw, lockParentPath(ROOT, name));

/** Starts `count` waiters one by one, each only after the previous one's node is in the queue. */
async function queueWaiters(
  client: LockClient,
  name: string,
  count: number,
  onAcquired: (i: number, handle: LockHandle) => Promise<void>,
): Promise<Promise<void>[]> {
  const base = (await queueOf(name)).length;
  const waiters: Promise<void>[] = [];
  for (let i = 0; i < count; i++) {
    waiters.push(
      client.acquire(name, { ttlMs: TTL, waitMs: 30_000 }).then((handle) => onAcquired(i, handle)),
    );
    expect(await waitFor(async () => (await queueOf(name)).length === base + i + 1, 5_000)).toBe(true);
  }
  return waiters;
}

describe('the lock recipe on a real ZooKeeper', () => {
  it('grants ten waiters in arrival order, with increasing tokens', async () => {
    const client = lockClient(service());
    const name = uniqueName('fifo');
    const holder = await client.acquire(name, { ttlMs: TTL });
    const order: number[] = [];
    const tokens: bigint[] = [holder.fencingToken];
    const waiters = await queueWaiters(client, name, 10, async (i, handle) => {
      order.push(i);
      tokens.push(handle.fencingToken);
      await handle.release();
    });
    await holder.release();
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
    expect(await queueOf(name)).toEqual([]);
  });

  it('wakes exactly one of 32 waiters per release (no herd)', async () => {
    const watched = countingClient(await connectedClient(ZK_CONNECT));
    toClose.push(watched);
    const client = lockClient(new ZooKeeperLockService({ client: watched, root: ROOT }));
    const holder = await lockClient(service()).acquire(uniqueName('warm'), { ttlMs: TTL });
    await holder.release();
    const name = uniqueName('herd');
    const first = await client.acquire(name, { ttlMs: TTL });
    const order: number[] = [];
    const waiters = await queueWaiters(client, name, 32, async (i, handle) => {
      order.push(i);
      await handle.release();
    });
    const before = { ...watched.counts };
    await first.release();
    await Promise.all(waiters);
    // 32 releases after `first`'s each hand the lock to the next waiter: one notice, one re-listing apiece.
    expect(watched.counts.notifications - before.notifications).toBe(32);
    expect(watched.counts.getChildren - before.getChildren).toBe(32);
    expect(order).toEqual(Array.from({ length: 32 }, (_, i) => i));
  });

  it('a waiter queued longer than the session timeout gets a live handle', { timeout: 30_000 }, async () => {
    const s = new ZooKeeperLockService({ connectionString: ZK_CONNECT, root: ROOT, sessionTimeoutMs: 4_000 });
    toClose.push(s);
    const client = lockClient(s);
    const name = uniqueName('longwait');
    const holder = await client.acquire(name, { ttlMs: 4_000 });
    const attempts: number[] = [];
    client.events.on('acquired', (event) => attempts.push(event.attempts));
    const waiting = client.acquire(name, { ttlMs: 4_000, waitMs: 15_000 });
    await new Promise((resolve) => setTimeout(resolve, 6_000)); // 1.5 session timeouts, renewed all along
    expect(holder.isHeld()).toBe(true);
    await holder.release();
    const next = await waiting;
    // One attempt: the grant was not thrown away as expired on arrival and queued again at the back.
    expect(attempts).toEqual([1]);
    expect(next.isHeld()).toBe(true);
    expect(next.expiresAt).toBeGreaterThan(performance.now() + 2_000);
    expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await next.renew()).toBe(true);
    await next.release();
  });

  it('a waiter whose budget runs out deletes its node', async () => {
    const client = lockClient(service());
    const name = uniqueName('budget');
    const holder = await client.acquire(name, { ttlMs: TTL });
    const error = await rejection(client.acquire(name, { ttlMs: TTL, waitMs: 300 }));
    expect(error).toBeInstanceOf(AcquireTimeoutError);
    expect(await queueOf(name)).toHaveLength(1);
    await holder.release();
    expect(await queueOf(name)).toEqual([]);
  });

  it('a waiter whose signal aborts leaves the queue', async () => {
    const client = lockClient(service());
    const name = uniqueName('abort');
    const holder = await client.acquire(name, { ttlMs: TTL });
    const controller = new AbortController();
    const waiting = client.acquire(name, { ttlMs: TTL, waitMs: 20_000, signal: controller.signal });
    expect(await waitFor(async () => (await queueOf(name)).length === 2, 5_000)).toBe(true);
    const reason = new Error('caller gave up');
    controller.abort(reason);
    expect(await rejection(waiting)).toBe(reason);
    expect(await waitFor(async () => (await queueOf(name)).length === 1, 3_000)).toBe(true);
    await holder.release();
  });

  it('a try costs 3 requests with its release when free, 2 when busy, and never creates a node in a held lock', async () => {
    const counted = countingClient(await connectedClient(ZK_CONNECT));
    toClose.push(counted);
    const client = lockClient(new ZooKeeperLockService({ client: counted, root: ROOT }));
    const name = uniqueName('trycost');
    await (await client.acquire(name, { ttlMs: TTL, waitMs: 0 })).release(); // makes the parent; checks the zxid
    let before = counted.counts.requests;
    for (let i = 0; i < 5; i++) await (await client.acquire(name, { ttlMs: TTL, waitMs: 0 })).release();
    // One multi (the empty parent deleted and re-created, the node created), the listing beside it, the delete.
    expect((counted.counts.requests - before) / 5).toBe(3);
    const holder = await lockClient(service()).acquire(name, { ttlMs: TTL });
    const czxid = (await statOf(raw, lockParentPath(ROOT, name)))?.czxid.readBigUInt64BE(0);
    before = counted.counts.requests;
    for (let i = 0; i < 5; i++) expect(await client.tryAcquire(name, { ttlMs: TTL })).toBeNull();
    // The multi refused with NotEmpty and the listing: the parent, and so the queue, was never written.
    expect((counted.counts.requests - before) / 5).toBe(2);
    expect((await statOf(raw, lockParentPath(ROOT, name)))?.czxid.readBigUInt64BE(0)).toBe(czxid);
    expect(await queueOf(name)).toHaveLength(1);
    await holder.release();
  });

  it('mints the holder node czxid as the fencing token', async () => {
    const s = service();
    const name = uniqueName('czxid');
    const signal = new AbortController().signal;
    // The first grant of a service checks the create reply's zxid against exists; later ones rely on it.
    for (let i = 0; i < 3; i++) {
      const result = await s.acquire({ name, ownerId: 'test', ttlMs: TTL, waitMs: 0, signal });
      if (!result.acquired) throw new Error('not acquired');
      const stat = await statOf(raw, `${lockParentPath(ROOT, name)}/${result.grant.ownershipToken}`);
      expect(stat?.czxid.readBigUInt64BE(0)).toBe(result.grant.fencingToken);
      expect(stat?.ephemeralOwner.toString('hex')).toBe(s.session?.id);
      expect(result.grant.ttlMs).toBe(s.session?.timeoutMs);
      await s.release({ name, ownerId: 'test', ...result.grant });
    }
  });

  it('deletes a lock parent once idle, and leaves one another process queues in', async () => {
    const quick = lockClient(service({ idleParentMs: 100 }));
    const slow = lockClient(service());
    const name = uniqueName('idle');
    const parent = lockParentPath(ROOT, name);
    const handle = await quick.acquire(name, { ttlMs: TTL });
    await handle.release();
    expect(await waitFor(async () => (await statOf(raw, parent)) === null, 3_000)).toBe(true);

    const held = await slow.acquire(name, { ttlMs: TTL });
    expect(await quick.tryAcquire(name, { ttlMs: TTL })).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 400)); // past quick's idle delay: NotEmpty, tolerated
    expect(await statOf(raw, parent)).not.toBeNull();
    expect(held.isHeld()).toBe(true);
    await held.release();
  });

  it('close() with a caller-owned client deletes the nodes it holds and leaves the client open', async () => {
    const own = await connectedClient(ZK_CONNECT);
    toClose.push(own);
    const s = new ZooKeeperLockService({ client: own, root: ROOT });
    const name = uniqueName('close');
    const signal = new AbortController().signal;
    const result = await s.acquire({ name, ownerId: 'test', ttlMs: TTL, waitMs: 0, signal });
    expect(result.acquired).toBe(true);
    expect(await queueOf(name)).toHaveLength(1);
    await s.close();
    expect(await queueOf(name)).toEqual([]);
    expect(own.getState().code).toBe(3);
    await expect(s.acquire({ name, ownerId: 'test', ttlMs: TTL, waitMs: 0, signal })).rejects.toMatchObject({
      code: 'CLIENT_CLOSED',
    });
  });
});

describe('protected mode through a fault proxy', () => {
  /**
   * A service that reaches ZooKeeper through a fault proxy, with its session up: one acquire and release of `name`
   * went through before the test starts dropping replies. `acquireOnce` is a single no-wait attempt on `name`.
   * `dropFromCommit` makes the proxy swallow every reply from the next multi's commit on: the try reads its parent
   * first, whose answer must arrive for the multi to go out.
   */
  async function behindProxy(name: string, requestTimeoutMs: number) {
    const proxy = await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) });
    toClose.push(proxy);
    const inner = await connectedClient(`127.0.0.1:${proxy.port}`, 6_000);
    toClose.push(inner);
    const fault = { armed: false };
    const client = new Proxy(inner, {
      get(target, property) {
        if (property === 'transaction') {
          return () => {
            const transaction = target.transaction();
            const commit = transaction.commit.bind(transaction);
            transaction.commit = (callback) => {
              if (fault.armed) proxy.dropReplies(true);
              commit(callback);
            };
            return transaction;
          };
        }
        const value: unknown = Reflect.get(target, property);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const s = new ZooKeeperLockService({ client, root: ROOT, requestTimeoutMs });
    toClose.push(s);
    const signal = new AbortController().signal;
    const acquireOnce = () => s.acquire({ name, ownerId: 'test', ttlMs: TTL, waitMs: 0, signal });
    const warm = await acquireOnce();
    if (warm.acquired) await s.release({ name, ownerId: 'test', ...warm.grant });
    const dropFromCommit = (on: boolean) => {
      fault.armed = on;
      if (!on) proxy.dropReplies(false);
    };
    return { proxy, s, acquireOnce, dropFromCommit };
  }

  it('finds the node of a create whose reply was lost, instead of queueing twice', async () => {
    const name = uniqueName('lostreply');
    const { proxy, s, acquireOnce, dropFromCommit } = await behindProxy(name, 4_000);

    dropFromCommit(true);
    const pending = acquireOnce();
    expect(await waitFor(async () => (await queueOf(name)).length === 1, 3_000)).toBe(true);
    dropFromCommit(false);
    proxy.resetAll(); // the client sees a connection loss for a create the server did make

    const result = await pending;
    expect(result.acquired).toBe(true);
    const queue = await queueOf(name);
    expect(queue).toHaveLength(1);
    if (result.acquired) {
      expect(queue[0]).toBe(result.grant.ownershipToken);
      expect(await s.release({ name, ownerId: 'test', ...result.grant })).toBe(true);
    }
    expect(await queueOf(name)).toEqual([]);
  });

  it('deletes the orphan of a create that timed out', async () => {
    const name = uniqueName('orphan');
    const { acquireOnce, dropFromCommit } = await behindProxy(name, 800);

    dropFromCommit(true);
    const error = await rejection(acquireOnce());
    expect(error).toMatchObject({ code: 'TRANSPORT' });
    expect(await queueOf(name)).toHaveLength(1); // made by the server, unknown to the client
    dropFromCommit(false);
    // The adapter finds it by its attempt id and deletes it once the connection works again.
    expect(await waitFor(async () => (await queueOf(name)).length === 0, 8_000, 100)).toBe(true);
  });
});
