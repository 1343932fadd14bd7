import { LockClient, type LostReason } from '@dlock/core';
import { startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { queueOrder } from '../src/keys.js';
import { closeAfterEach } from './close-after-each.js';
import { childrenOf, connectedClient, reconnectedUnder, sleep, waitFor } from './helpers.js';

// A client passed in whose session the adapter gave up on, while the server kept it: the server's replies are
// swallowed (requests, pings and the reconnect handshake still reach it), so the adapter hears nothing for a whole
// session timeout and declares the session over, but the server never expires it. Then the replies flow again and
// the client comes back under the same session id.
const ROOT = '/dlock-test/given-up';
const SESSION_MS = 4_000; // the shared server's minimum (tickTime 2000)
const onClose = closeAfterEach();

describe('a caller-owned client whose session comes back after the adapter gave it up', () => {
  it('the old grant and queue node are deleted on the reconnect, and another client can acquire', {
    timeout: 40_000,
  }, async () => {
    const proxy = onClose(await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) }));
    const own: ZooKeeperClientLike = onClose(await connectedClient(`127.0.0.1:${proxy.port}`, SESSION_MS));
    const service = onClose(new ZooKeeperLockService({ client: own, root: ROOT }));
    const locks = onClose(new LockClient(service));
    // Another process: holds `queued`, so that this service has a node waiting in its queue.
    const other = onClose(new ZooKeeperLockService({ connectionString: ZK_CONNECT, root: ROOT }));
    const otherLocks = onClose(new LockClient(other));
    const raw = onClose(await connectedClient(ZK_CONNECT));
    const queueOf = async (name: string): Promise<string[]> =>
      queueOrder(await childrenOf(raw, lockParentPath(ROOT, name)));

    const held = uniqueName('held');
    const queued = uniqueName('queued');
    const lost: LostReason[] = [];
    const handle = await locks.acquire(held, {
      ttlMs: SESSION_MS,
      onLost: (_h, reason) => lost.push(reason),
    });
    const blocker = await otherLocks.acquire(queued, { ttlMs: SESSION_MS });
    const giveUp = new AbortController();
    const waiting = locks.acquire(queued, { ttlMs: SESSION_MS, waitMs: 30_000, signal: giveUp.signal });
    waiting.catch(() => {});
    expect(await waitFor(async () => (await queueOf(queued)).length === 2, 5_000)).toBe(true);
    // The waiter's watch on the holder's node is set right after its node is listed. Were its reply swallowed, the
    // waiter would give up at that request's deadline and leave the queue while requests still get through.
    await sleep(500);
    const sessionId = service.session?.id;
    const [heldNode] = await queueOf(held);
    const [blockerNode, waiterNode] = await queueOf(queued);
    expect(heldNode).toBeDefined();
    expect(waiterNode).toBeDefined();

    proxy.dropReplies(true);
    // The adapter gives the session up about one session timeout after the last answer.
    expect(await waitFor(() => service.session === undefined && handle.state === 'lost', 10_000, 50)).toBe(
      true,
    );
    expect(lost).toHaveLength(1);
    // The server still has the session (it heard the client's reconnect handshake), and so the nodes.
    expect(await queueOf(held)).toEqual([heldNode]);
    expect(await queueOf(queued)).toEqual([blockerNode, waiterNode]);
    // Core would retry the waiting acquire within its budget (it cannot reconnect yet): the caller gives up.
    const reason = new Error('caller gave up');
    giveUp.abort(reason);
    await expect(waiting).rejects.toBe(reason);

    // Heal: the client's pending handshake was swallowed; a reset makes it reconnect, under the same session.
    proxy.dropReplies(false);
    proxy.resetAll();
    expect(await reconnectedUnder(own, sessionId)).toBe(true);

    expect(await waitFor(async () => (await queueOf(held)).length === 0, 5_000, 50)).toBe(true);
    expect(await waitFor(async () => (await queueOf(queued)).length === 1, 5_000, 50)).toBe(true);
    expect(await queueOf(queued)).toEqual([blockerNode]);
    expect(blocker.isHeld()).toBe(true);

    // Another client takes the freed lock at once, and is next in line for the other.
    const next = await otherLocks.acquire(held, { ttlMs: SESSION_MS, waitMs: 0 });
    const after = otherLocks.acquire(queued, { ttlMs: SESSION_MS, waitMs: 10_000 });
    await sleep(100);
    await blocker.release();
    const second = await after;
    expect(second.isHeld()).toBe(true);
    await next.release();
    await second.release();
    // This service itself never uses that session again.
    await expect(locks.acquire(uniqueName('later'), { ttlMs: SESSION_MS })).rejects.toMatchObject({
      code: 'TRANSPORT',
    });
  });
});
