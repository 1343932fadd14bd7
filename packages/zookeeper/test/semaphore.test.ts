import { LockClient, type Permit, PermitsMismatchError } from '@dlock/core';
import { rejection, startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { semaphorePath } from '../src/keys.js';
import { childrenOf, connectedClient, countingClient, statOf, waitFor } from './helpers.js';

// Semaphores on the shared ZooKeeper: the node layout, FIFO without a herd, tryAcquire against a queue, aborted
// waiters, the cost of a cycle, lost replies. (Paused and killed holders, and session loss, are in
// semaphore-faults.test.ts, on a private server with short sessions.)
const ROOT = '/dlock-test/semaphore';
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

function service(options: Partial<{ idleParentMs: number }> = {}): ZooKeeperLockService {
  const s = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT, ...options });
  toClose.push(s);
  return s;
}

function lockClient(s: ZooKeeperLockService): LockClient {
  const client = new LockClient(s);
  toClose.push(client);
  return client;
}

/** Every node under a semaphore's node, as `child` or `child/grandchild`, sorted. */
async function treeOf(name: string): Promise<string[]> {
  const semaphore = semaphorePath(ROOT, name);
  const nodes: string[] = [];
  for (const child of await childrenOf(raw, semaphore)) {
    nodes.push(child);
    for (const grandchild of await childrenOf(raw, `${semaphore}/${child}`))
      nodes.push(`${child}/${grandchild}`);
  }
  return nodes.sort();
}

const queueOf = async (name: string, permits: number): Promise<string[]> =>
  childrenOf(raw, `${semaphorePath(ROOT, name)}/queue-${permits}`);

function create(path: string, mode: number): Promise<string> {
  return new Promise((resolve, reject) =>
    raw.create(path, Buffer.alloc(0), mode, (error, created) => (error ? reject(error) : resolve(created))),
  );
}

function remove(path: string): Promise<void> {
  return new Promise((resolve, reject) =>
    raw.remove(path, -1, (error) => (error ? reject(error) : resolve())),
  );
}

describe('semaphores on a real ZooKeeper', () => {
  it('keeps holders as ephemeral slot nodes whose czxid is the token, apart from a lock of the same name', async () => {
    const s = service();
    const client = lockClient(s);
    const name = uniqueName('layout');
    const lock = await client.acquire(name, { ttlMs: TTL });
    const gpus = client.semaphore(name, { permits: 3, ttlMs: TTL });
    const permits = [await gpus.acquire(), await gpus.acquire()];
    expect(permits.map((p) => p.slot)).toEqual([0, 1]);
    expect(await treeOf(name)).toEqual(['queue-3', 'slots-3', 'slots-3/0', 'slots-3/1']);
    for (const permit of permits) {
      const stat = await statOf(raw, `${semaphorePath(ROOT, name)}/slots-3/${permit.slot}`);
      expect(stat?.czxid.readBigUInt64BE(0)).toBe(permit.fencingToken);
      expect(stat?.ephemeralOwner.toString('hex')).toBe(s.session?.id);
    }
    expect(await gpus.available()).toBe(1);
    await Promise.all([...permits, lock].map((h) => h.release()));
    expect(await treeOf(name)).toEqual(['queue-3', 'slots-3']);
  });

  it('serves 6 waiters in arrival order, waking one waiter per release (no herd)', async () => {
    const holders = lockClient(service());
    const watched = countingClient(await connectedClient(ZK_CONNECT));
    toClose.push(watched);
    const waiting = lockClient(new ZooKeeperLockService({ client: watched, keyPrefix: ROOT }));
    const name = uniqueName('fifo');
    const pool = (c: LockClient) => c.semaphore(name, { permits: 2, ttlMs: TTL });
    const held = [await pool(holders).acquire(), await pool(holders).acquire()];
    const order: number[] = [];
    const granted: Permit[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 6; i++) {
      waiters.push(
        pool(waiting)
          .acquire({ waitMs: 30_000 })
          .then((permit) => {
            order.push(i);
            granted.push(permit);
          }),
      );
      expect(await waitFor(async () => (await queueOf(name, 2)).length === i + 1, 5_000)).toBe(true);
    }
    const tokens = new Map(held.map((p) => [p.slot, p.fencingToken]));
    const before = watched.counts.notifications;
    const released: Permit[] = [...held];
    for (let served = 0; served < 6; served++) {
      await released[served]?.release();
      expect(await waitFor(() => order.length === served + 1, 5_000)).toBe(true);
      const permit = granted[served] as Permit;
      expect(permit.fencingToken).toBeGreaterThan(tokens.get(permit.slot) as bigint);
      tokens.set(permit.slot, permit.fencingToken);
      released.push(permit);
    }
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    // Per grant at most: the first waiter's watch on the slots, and the next waiter's watch on its predecessor (not
    // the last grant's); never one per waiter. The predecessor watches were all set while the six queued, so each
    // of those 5 fires; a new first waiter that lists the slots only after the next release needs no notice.
    const notifications = watched.counts.notifications - before;
    expect(notifications).toBeGreaterThanOrEqual(1 + 5);
    expect(notifications).toBeLessThanOrEqual(6 + 5);
    await Promise.all(released.slice(2).map((p) => p.release()));
    expect(await treeOf(name)).toEqual(['queue-2', 'slots-2']);
  });

  it('tryAcquire never overtakes a queued waiter, even with a slot free; takes the slot once nobody waits', async () => {
    const client = lockClient(service());
    const name = uniqueName('overtake');
    const pool = client.semaphore(name, { permits: 2, ttlMs: TTL });
    const held = await pool.acquire();
    // A waiter of another process that has not yet taken the free slot (frozen between its steps): a queue node.
    const other = await create(`${semaphorePath(ROOT, name)}/queue-2/_c_${'0'.repeat(32)}-`, 3);
    expect(await pool.available()).toBe(1);
    expect(await pool.tryAcquire()).toBeNull();
    expect(await rejection(pool.acquire({ waitMs: 200 }))).toMatchObject({ code: 'ACQUIRE_TIMEOUT' });
    expect(await queueOf(name, 2)).toEqual([other.split('/').pop()]);
    await remove(other);
    const taken = await pool.tryAcquire();
    expect(taken?.slot).toBe(1);
    await Promise.all([held.release(), taken?.release()]);
  });

  it('200 waiters that time out or are aborted leave no node behind', { timeout: 30_000 }, async () => {
    const name = uniqueName('aborted');
    const holder = await lockClient(service()).semaphore(name, { permits: 1, ttlMs: TTL }).acquire();
    const services = [service(), service(), service(), service()];
    const clients = services.map(lockClient);
    const attempts = Array.from({ length: 200 }, async (_, i) => {
      const pool = (clients[i % 4] as LockClient).semaphore(name, { permits: 1, ttlMs: TTL });
      if (i % 2 === 0) return rejection(pool.acquire({ waitMs: 50 + ((i * 7) % 400) }));
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error('gave up')), (i * 13) % 500);
      return rejection(pool.acquire({ waitMs: 30_000, signal: controller.signal }));
    });
    const errors = await Promise.all(attempts);
    expect(errors.filter((e) => (e as { code?: string }).code === 'ACQUIRE_TIMEOUT')).toHaveLength(100);
    expect(errors.filter((e) => (e as Error).message === 'gave up')).toHaveLength(100);
    // Leaving is done before each call settles, or in the background right after: give that a moment.
    expect(await waitFor(async () => (await treeOf(name)).length === 3, 5_000, 50)).toBe(true);
    expect(await treeOf(name)).toEqual(['queue-1', 'slots-1', 'slots-1/0']);
    await holder.release();
    const next = await clients[0]?.semaphore(name, { permits: 1, ttlMs: TTL }).tryAcquire();
    expect(next?.fencingToken).toBeGreaterThan(holder.fencingToken);
    await next?.release();
    expect(await treeOf(name)).toEqual(['queue-1', 'slots-1']);
  });

  it('costs 4 requests per uncontended acquire and release', async () => {
    const counted = countingClient(await connectedClient(ZK_CONNECT));
    toClose.push(counted);
    const client = lockClient(new ZooKeeperLockService({ client: counted, keyPrefix: ROOT }));
    const pool = client.semaphore(uniqueName('cost'), { permits: 4, ttlMs: TTL });
    await (await pool.acquire()).release(); // sets the semaphore up; checks the reply zxid once
    const before = counted.counts.requests;
    for (let i = 0; i < 5; i++) await (await pool.acquire()).release();
    // List the slots and read the queue parent's ACL (one round trip); one multi (the queue parent deleted and
    // re-created empty, the slot created); delete the slot.
    expect((counted.counts.requests - before) / 5).toBe(4);
  });

  it('refuses another limit while a holder or a waiter uses the semaphore, names both, and takes one when idle', async () => {
    const client = lockClient(service());
    const name = uniqueName('limit');
    const held = await client.semaphore(name, { permits: 1, ttlMs: TTL }).acquire();
    const waiter = client.semaphore(name, { permits: 1, ttlMs: TTL }).acquire({ waitMs: 30_000 });
    expect(await waitFor(async () => (await queueOf(name, 1)).length === 1, 5_000)).toBe(true);
    const error = await rejection(
      client.semaphore(name, { permits: 5, ttlMs: TTL }).acquire({ waitMs: 100 }),
    );
    expect(error).toBeInstanceOf(PermitsMismatchError);
    expect(error).toMatchObject({ semaphoreName: name, requested: 5, stored: 1 });
    await held.release();
    const next = await waiter;
    // Only the waiter now: still refused.
    expect(await rejection(client.semaphore(name, { permits: 2, ttlMs: TTL }).tryAcquire())).toBeInstanceOf(
      PermitsMismatchError,
    );
    await next.release();
    const wider = await client.semaphore(name, { permits: 2, ttlMs: TTL }).tryAcquire();
    expect(wider?.slot).toBe(0);
    expect(await treeOf(name)).toEqual(['queue-2', 'slots-2', 'slots-2/0']);
    await wider?.release();
  });

  it('re-makes a parent deleted by hand instead of failing', async () => {
    const client = lockClient(service());
    const name = uniqueName('handmade');
    const pool = client.semaphore(name, { permits: 2, ttlMs: TTL });
    await (await pool.acquire()).release();
    const semaphore = semaphorePath(ROOT, name);
    await remove(`${semaphore}/queue-2`);
    const first = await pool.acquire({ waitMs: 1_000 });
    expect(await treeOf(name)).toEqual(['queue-2', 'slots-2', 'slots-2/0']);
    await first.release();
    await remove(`${semaphore}/slots-2`);
    const second = await pool.acquire({ waitMs: 1_000 });
    expect(await treeOf(name)).toEqual(['queue-2', 'slots-2', 'slots-2/0']);
    await second.release();
  });

  it('a take that finds its limit swapped away leaves no parent of that limit behind', async () => {
    const inner = await connectedClient(ZK_CONNECT);
    toClose.push(inner);
    const swap: { before: (() => Promise<void>) | undefined } = { before: undefined };
    // The next take's multi is sent only after `swap.before` ran: between the listing of the slots and the take.
    const client = new Proxy(inner, {
      get(target, property) {
        if (property === 'transaction') {
          return () => {
            const transaction = target.transaction();
            const commit = transaction.commit.bind(transaction);
            transaction.commit = (callback) => {
              const before = swap.before;
              swap.before = undefined;
              if (before) void before().then(() => commit(callback));
              else commit(callback);
            };
            return transaction;
          };
        }
        const value: unknown = Reflect.get(target, property);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const s = new ZooKeeperLockService({ client, keyPrefix: ROOT });
    toClose.push(s);
    const name = uniqueName('swapped');
    const semaphore = semaphorePath(ROOT, name);
    const pool = lockClient(s).semaphore(name, { permits: 2, ttlMs: TTL });
    await (await pool.acquire()).release();
    // Another process switches the idle semaphore to 3 permits and takes one.
    swap.before = async () => {
      await remove(`${semaphore}/queue-2`);
      await remove(`${semaphore}/slots-2`);
      for (const path of [`${semaphore}/queue-3`, `${semaphore}/slots-3`]) await create(path, 0);
      await create(`${semaphore}/slots-3/0`, 1);
    };
    expect(await rejection(pool.tryAcquire())).toMatchObject({ requested: 2, stored: 3 });
    expect(await treeOf(name)).toEqual(['queue-3', 'slots-3', 'slots-3/0']);
  });

  it('deletes an idle semaphore node with its parents, and one every process left behind', {
    timeout: 20_000,
  }, async () => {
    const quick = lockClient(service({ idleParentMs: 100 }));
    const name = uniqueName('idle');
    const semaphore = semaphorePath(ROOT, name);
    await (await quick.semaphore(name, { permits: 2, ttlMs: TTL }).acquire()).release();
    expect(await waitFor(async () => (await statOf(raw, semaphore)) === null, 3_000)).toBe(true);

    // Left by a process that died: the sweep of a live service finds it idle twice and deletes it.
    const abandoned = semaphorePath(ROOT, uniqueName('abandoned'));
    for (const path of [abandoned, `${abandoned}/queue-3`, `${abandoned}/slots-3`]) await create(path, 0);
    // With a parent of another limit beside them (left by a process of an older version, or made by hand).
    await create(`${abandoned}/queue-2`, 0);
    const sweeping = service({ idleParentMs: 200 });
    await lockClient(sweeping).semaphore(uniqueName('warm'), { permits: 1, ttlMs: TTL }).tryAcquire();
    expect(await waitFor(async () => (await statOf(raw, abandoned)) === null, 8_000, 100)).toBe(true);
  });
});

describe('semaphores through a fault proxy', () => {
  /**
   * A service on a client that reaches ZooKeeper through a fault proxy, which starts dropping replies the moment the
   * client commits a multi (the take of a slot): its reads before that are answered. One take and release of `name`
   * went through before the test arms the fault. `acquireOnce` is a single no-wait attempt on `name`.
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
    const s = new ZooKeeperLockService({ client, keyPrefix: ROOT, requestTimeoutMs });
    toClose.push(s);
    const signal = new AbortController().signal;
    const acquireOnce = () =>
      s.acquirePermit({ name, ownerId: 'test', ttlMs: TTL, waitMs: 0, signal, permits: 2 });
    const warm = await acquireOnce();
    if (warm.acquired) await s.release({ name, ownerId: 'test', ...warm.grant });
    return { proxy, s, acquireOnce, fault };
  }

  const slotsOf = (name: string) => childrenOf(raw, `${semaphorePath(ROOT, name)}/slots-2`);

  it('finds the slot node of a take whose reply was lost, instead of taking a second one', async () => {
    const name = uniqueName('lostreply');
    const { proxy, s, acquireOnce, fault } = await behindProxy(name, 4_000);
    fault.armed = true;
    const pending = acquireOnce();
    expect(await waitFor(async () => (await slotsOf(name)).length === 1, 3_000)).toBe(true);
    fault.armed = false;
    proxy.dropReplies(false);
    proxy.resetAll(); // the client sees a connection loss for a multi the server did commit
    const result = await pending;
    expect(result.acquired).toBe(true);
    expect(await slotsOf(name)).toEqual(['0']);
    if (result.acquired) {
      expect(result.grant.slot).toBe(0);
      const stat = await statOf(raw, `${semaphorePath(ROOT, name)}/slots-2/0`);
      expect(stat?.czxid.readBigUInt64BE(0)).toBe(result.grant.fencingToken);
      expect(await s.release({ name, ownerId: 'test', ...result.grant })).toBe(true);
    }
    expect(await slotsOf(name)).toEqual([]);
  });

  it('deletes the slot node of a take that timed out soon after the connection works again', async () => {
    const name = uniqueName('orphan');
    const { proxy, acquireOnce, fault } = await behindProxy(name, 800);
    fault.armed = true;
    expect(await rejection(acquireOnce())).toMatchObject({ code: 'TRANSPORT' });
    fault.armed = false;
    expect(await slotsOf(name)).toEqual(['0']); // made by the server, unknown to the client
    proxy.dropReplies(false);
    const healedAt = Date.now();
    expect(await waitFor(async () => (await slotsOf(name)).length === 0, 8_000, 50)).toBe(true);
    const orphanedMs = Date.now() - healedAt;
    // One request bound (800 ms) for a look sent before the heal, plus the background retry's backoff (≤ 1 s).
    expect(orphanedMs).toBeLessThan(800 + 1_000 + 500);
  });
});
