import { type AcquireResult, type Lease, UnsupportedError } from '@dlock/core';
import { rejection } from '@dlock/test-utils';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { CLIENT_METHODS } from '../src/client-like.js';
import type { ZooKeeperClientLike } from '../src/index.js';
import { ZooKeeperLockService } from '../src/index.js';
import { CONNECTED, DISCONNECTED, FakeZooKeeper } from './fake-zookeeper.js';

// The calls elections need (inspect, updateMetadata, watchChanges) and the re-check after a reconnect, on a
// FakeClock and the in-memory client: exact counts of server watches and notices. (The same against the real server:
// election-contract.test.ts and election.test.ts.)
const TIMEOUT = 3_000;
const TICK = 100;

async function setup(client?: (zk: FakeZooKeeper) => ZooKeeperClientLike) {
  const clock = new FakeClock();
  const zk = new FakeZooKeeper(TIMEOUT);
  const service = new ZooKeeperLockService({
    client: client ? client(zk) : zk,
    clock,
    keyPrefix: '/locks',
    idleParentMs: 60_000,
  });
  const acquire = (name: string, waitMs: number, metadata?: string) =>
    service.acquire({
      name,
      ownerId: 'me',
      ttlMs: 1_000,
      waitMs,
      signal: new AbortController().signal,
      ...(metadata === undefined ? {} : { metadata }),
    });
  const lease = (name: string, result: AcquireResult): Lease => {
    if (!result.acquired) throw new Error(`${name} not acquired`);
    return { name, ownerId: 'me', ...result.grant };
  };
  const queue = (name: string): string[] => zk.children(`/locks/${name}`).sort();
  /** Lets the fake's microtask answers and the watches' re-reads run. */
  const settle = () => clock.advance(TICK);
  return { clock, zk, service, acquire, lease, queue, settle };
}

describe('inspect and updateMetadata (fake clock)', () => {
  it('inspect reports the head: its czxid, its metadata, the nodes behind it as waiters', async () => {
    const { service, acquire, lease, settle } = await setup();
    expect(await service.inspect('a')).toEqual({ held: false });
    const held = lease('a', await acquire('a', 0, 'leader-1'));
    const waiters = [acquire('a', 60_000, 'w1'), acquire('a', 60_000)];
    await settle();
    expect(await service.inspect('a')).toEqual({
      held: true,
      fencingToken: held.fencingToken,
      metadata: 'leader-1',
      // The owner id is in every node's data since inspection landed.
      ownerId: 'me',
      waiters: 2,
    });
    expect(await service.release(held)).toBe(true);
    await settle();
    const next = lease('a', await (waiters[0] as Promise<AcquireResult>));
    // The metadata went with the waiter's node from its create: it holds it the moment it is first.
    expect(await service.inspect('a')).toEqual({
      held: true,
      fencingToken: next.fencingToken,
      metadata: 'w1',
      ownerId: 'me',
      waiters: 1,
    });
    await service.release(next);
    await settle();
    const last = lease('a', await (waiters[1] as Promise<AcquireResult>));
    // A grant without metadata reports none; its node holds only the owner id, which inspect reports.
    expect(await service.inspect('a')).toEqual({
      held: true,
      fencingToken: last.fencingToken,
      ownerId: 'me',
      waiters: 0,
    });
    await service.close();
  });

  it('inspect skips a listed head that went before its data was read', async () => {
    const { zk, service, acquire, lease, queue, settle } = await setup();
    const held = lease('a', await acquire('a', 0, 'one'));
    const waiting = acquire('a', 60_000, 'two');
    await settle();
    const [head] = queue('a');
    // The head goes right after the listing: the next listed node is read instead.
    const getChildren = zk.getChildren.bind(zk);
    let once = true;
    zk.getChildren = ((path: string, a: unknown, b?: unknown) => {
      getChildren(path, a as never, b as never);
      if (once && path === '/locks/a' && b === undefined) {
        once = false;
        queueMicrotask(() => zk.deleteNode(head as string));
      }
    }) as typeof zk.getChildren;
    const info = await service.inspect('a');
    expect(info).toMatchObject({ held: true, metadata: 'two', waiters: 0 });
    expect(info.fencingToken).toBeGreaterThan(held.fencingToken);
    await settle();
    await waiting;
    await service.close();
  });

  it('updateMetadata rewrites one’s own node, keeping the token; false once the node is gone', async () => {
    const { zk, service, acquire, lease, settle } = await setup();
    const held = lease('a', await acquire('a', 0, 'v1'));
    expect(await service.updateMetadata(held, 'v2')).toBe(true);
    expect(await service.inspect('a')).toMatchObject({ metadata: 'v2', fencingToken: held.fencingToken });
    expect(await service.updateMetadata({ ...held, ownershipToken: `${held.ownershipToken}x` }, 'v3')).toBe(
      false,
    );
    zk.deleteNode(`/locks/a/${held.ownershipToken}`);
    expect(await service.updateMetadata(held, 'v4')).toBe(false);
    // Forgotten: a renewal says so too, without asking the server.
    const calls = zk.calls.length;
    expect(await service.renew({ lease: held, ttlMs: 1_000 })).toEqual({ renewed: false });
    expect(zk.calls.length).toBe(calls);
    await settle();
    await service.close();
  });

  it('a client without setData: updateMetadata rejects with UnsupportedError; locks still work', async () => {
    const { service, acquire, lease } = await setup((zk) => {
      // Every method of the client-like shape but setData, each bound to the fake.
      const bare: Record<string, unknown> = { connectionManager: zk.connectionManager };
      for (const method of CLIENT_METHODS)
        bare[method] = (zk[method] as (...args: never[]) => unknown).bind(zk);
      return bare as unknown as ZooKeeperClientLike;
    });
    const held = lease('a', await acquire('a', 0, 'v1'));
    expect(await rejection(service.updateMetadata(held, 'v2'))).toBeInstanceOf(UnsupportedError);
    expect(await service.release(held)).toBe(true);
    await service.close();
  });
});

describe('watchChanges (fake clock)', () => {
  it('one child watch and one data watch per name for the whole service; each subscriber told once when in place', async () => {
    const { zk, service, acquire, lease, settle } = await setup();
    const held = lease('a', await acquire('a', 0, 'v1'));
    const before = zk.watchCount;
    const seen = [0, 0, 0];
    const stops = seen.map((_, i) =>
      service.watchChanges('a', () => {
        seen[i] = (seen[i] as number) + 1;
      }),
    );
    await settle();
    expect(seen).toEqual([1, 1, 1]);
    // The parent's child watch and the head's data watch; the queue's own waiters set none here.
    expect(zk.watchCount - before).toBe(2);
    const late = [0];
    const stopLate = service.watchChanges('a', () => {
      late[0] = (late[0] as number) + 1;
    });
    await settle();
    expect(late).toEqual([1]);
    expect(zk.watchCount - before).toBe(2);

    // A waiter joining behind the head changes nothing an observer sees.
    const waiting = acquire('a', 60_000, 'v2');
    await settle();
    expect(seen).toEqual([1, 1, 1]);
    // The holder's metadata changes: everyone is told.
    expect(await service.updateMetadata(held, 'v1+')).toBe(true);
    await settle();
    expect(seen).toEqual([2, 2, 2]);
    // The holder goes: the waiter is first.
    await service.release(held);
    await settle();
    await waiting;
    expect(seen).toEqual([3, 3, 3]);
    expect(late).toEqual([3]);

    for (const stop of stops) stop();
    stopLate();
    const afterStop = zk.calls.length;
    await service.updateMetadata(lease('a', await waiting), 'v3');
    await settle();
    expect(seen).toEqual([3, 3, 3]);
    // The watch that fired found nobody subscribed and read nothing again.
    expect(zk.calls.slice(afterStop).filter((c) => c.startsWith('get'))).toEqual([]);
    await service.close();
  });

  it('a lock that does not exist yet: told when it is first granted', async () => {
    const { service, acquire, settle } = await setup();
    let calls = 0;
    const stop = service.watchChanges('fresh', () => {
      calls += 1;
    });
    await settle();
    expect(calls).toBe(1);
    await acquire('fresh', 0, 'x');
    await settle();
    expect(calls).toBe(2);
    stop();
    await service.close();
  });
});

describe('after a reconnect under the same session (fake clock)', () => {
  it('every grant is checked on the server at once; one whose node went is reported lost, the others kept', async () => {
    const { zk, service, acquire, lease, settle } = await setup();
    const reports: (readonly string[])[] = [];
    service.watchLeases((tokens) => reports.push(tokens));
    const a = lease('a', await acquire('a', 0));
    const b = lease('b', await acquire('b', 0));
    let changes = 0;
    service.watchChanges('b', () => {
      changes += 1;
    });
    await settle();
    expect(changes).toBe(1);
    zk.setState(DISCONNECTED);
    // Deleted while the client was away (an operator, a bug elsewhere): the session itself lives on.
    zk.deleteNode(`/locks/a/${a.ownershipToken}`);
    zk.setState(CONNECTED);
    await settle();
    expect(reports).toEqual([[a.ownershipToken]]);
    expect(await service.renew({ lease: b, ttlMs: 1_000 })).toEqual({ renewed: true, ttlMs: TIMEOUT });
    // Observers are told to read again: changes may have been missed while away.
    expect(changes).toBe(2);
    await service.close();
  });
});
