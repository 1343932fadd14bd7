import type { AcquireResult, Lease } from '@dlock/core';
import { rejection } from '@dlock/test-utils';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { FakeZooKeeper } from './fake-zookeeper.js';

// The queue as core's algorithm runs it over this adapter's protocol, on a FakeClock and an in-memory client: a
// node that vanishes, a service that closes under its waiters, a delete that has to be retried. (FIFO order, the
// herd and protected mode against a real server are in recipe.test.ts.)
const TIMEOUT = 3_000;
const TICK = 100;

async function setup() {
  const clock = new FakeClock();
  const zk = new FakeZooKeeper(TIMEOUT);
  const service = new ZooKeeperLockService({ client: zk, clock, keyPrefix: '/locks', idleParentMs: 60_000 });
  const acquire = (name: string, waitMs: number, signal = new AbortController().signal) =>
    service.acquire({ name, ownerId: 'me', ttlMs: 1_000, waitMs, signal });
  const lease = (name: string, result: AcquireResult): Lease => {
    if (!result.acquired) throw new Error(`${name} not acquired`);
    return { name, ownerId: 'me', ...result.grant };
  };
  const queue = (name: string): string[] => zk.children(`/locks/${name}`).sort();
  return { clock, zk, service, acquire, lease, queue };
}

function remove(zk: FakeZooKeeper, path: string): Promise<void> {
  return new Promise((resolve, reject) =>
    zk.remove(path, -1, (error) => (error ? reject(error) : resolve())),
  );
}

describe('the queue over the ZooKeeper protocol (fake clock)', () => {
  it('a waiter whose node was deleted behind its back starts over with a new node, and gets the lock', async () => {
    const { clock, zk, service, acquire, lease, queue } = await setup();
    const held = lease('a', await acquire('a', 0));
    const waiting = acquire('a', 10_000);
    await clock.advance(TICK);
    const [, waiterNode] = queue('a');
    expect(waiterNode).toBeDefined();
    await remove(zk, waiterNode as string); // an operator, or a bug elsewhere
    expect(await service.release(held)).toBe(true);
    await clock.advance(TICK);
    const result = await waiting;
    expect(result.acquired).toBe(true);
    if (result.acquired) {
      expect(result.grant.fencingToken).toBeGreaterThan(held.fencingToken);
      expect(queue('a')).toEqual([`/locks/a/${result.grant.ownershipToken}`]);
    }
    await service.close();
  });

  it('close() stops every waiter: each rejects with CLIENT_CLOSED and its node is deleted', async () => {
    const { clock, service, acquire, lease, queue } = await setup();
    lease('a', await acquire('a', 0));
    const waiters = [acquire('a', 60_000), acquire('a', 60_000)].map(rejection);
    await clock.advance(TICK);
    expect(queue('a')).toHaveLength(3);
    const closing = service.close();
    await clock.advance(TICK);
    await closing;
    for (const error of await Promise.all(waiters)) expect(error).toMatchObject({ code: 'CLIENT_CLOSED' });
    // A client passed in stays open: the holder's node and the waiters' nodes are all deleted.
    expect(queue('a')).toEqual([]);
  });

  it('a waiter that gives up while the server is silent has its node deleted once the server answers', async () => {
    const { clock, zk, service, acquire, lease, queue } = await setup();
    const held = lease('a', await acquire('a', 0));
    const giveUp = new AbortController();
    const waiting = rejection(acquire('a', 60_000, giveUp.signal));
    await clock.advance(TICK);
    expect(queue('a')).toHaveLength(2);
    zk.silent = true;
    const reason = new Error('gave up');
    giveUp.abort(reason);
    await clock.advance(TIMEOUT / 3 + TICK); // the delete goes unanswered and runs out of time
    expect(await waiting).toBe(reason);
    expect(queue('a')).toHaveLength(2);
    zk.silent = false;
    // Renewed, or the holder's node would be reaped as unrenewed a session timeout after its grant.
    const renewal = service.renew({ lease: held, ttlMs: 1_000 });
    await clock.advance(0);
    expect(await renewal).toMatchObject({ renewed: true });
    await clock.advance(2_000); // retried in the background
    expect(queue('a')).toEqual([`/locks/a/${held.ownershipToken}`]);
    expect(service.session).toBeDefined();
    await service.close();
  });

  it('a try that does not wait writes nothing into a held lock: its parent read (getACL) and listed', async () => {
    const { zk, service, acquire, lease, queue } = await setup();
    const held = lease('a', await acquire('a', 0));
    const before = zk.calls.length;
    expect(await acquire('a', 0)).toEqual({ acquired: false });
    const sent = zk.calls.slice(before);
    expect(sent).toHaveLength(2);
    expect(sent).toEqual(['getACL /locks/a', 'getChildren /locks/a']);
    expect(queue('a')).toEqual([`/locks/a/${held.ownershipToken}`]);
    expect(await service.release(held)).toBe(true);
    // Free now: the read and one multi take it, with the node's czxid as the token (above the last holder's).
    const free = zk.calls.length;
    const taken = lease('a', await acquire('a', 0));
    const took = zk.calls.slice(free);
    expect(took[0]).toBe('getACL /locks/a');
    expect(took[1]).toMatch(
      /^multi delete \/locks\/a, create \/locks\/a, setData \/locks\/a, create \/locks\/a\/_c_[0-9a-f]{32}-$/,
    );
    expect(taken.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(queue('a')).toEqual([`/locks/a/${taken.ownershipToken}`]);
    await service.close();
  });

  it('a try finds a missing parent made, and a parent kept busy by a node that is no queue node no obstacle', async () => {
    const { zk, service, acquire, lease, queue } = await setup();
    const first = lease('fresh', await acquire('fresh', 0));
    expect(queue('fresh')).toEqual([`/locks/fresh/${first.ownershipToken}`]);
    expect(await service.release(first)).toBe(true);
    // Some other tool's node under the parent: NotEmpty for ever, so the ordinary create decides.
    await new Promise<void>((resolve, reject) =>
      zk.create('/locks/fresh/note', Buffer.alloc(0), 0, (error) => (error ? reject(error) : resolve())),
    );
    const second = lease('fresh', await acquire('fresh', 0));
    expect(queue('fresh')).toEqual(['/locks/fresh/note', `/locks/fresh/${second.ownershipToken}`].sort());
    await service.close();
  });
});
