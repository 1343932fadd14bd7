import type { Lease } from '@dlock/core';
import { rejection } from '@dlock/test-utils';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { CONNECTED, DISCONNECTED, EXPIRED, FakeZooKeeper } from './fake-zookeeper.js';

// What a service does with the nodes of a session it gave up on while the client passed in lives on, and what
// release() answers when the session ended: on a FakeClock and an in-memory client, no real sleeps. (The same
// against a real server is in given-up-session.test.ts and paused-holder.test.ts.)
const TIMEOUT = 3_000;
const TICK = 100;

async function setup(options: { requestTimeoutMs?: number } = {}) {
  const clock = new FakeClock();
  const zk = new FakeZooKeeper(TIMEOUT);
  const service = new ZooKeeperLockService({
    client: zk,
    clock,
    root: '/locks',
    idleParentMs: 60_000,
    ...options,
  });
  const reports: (readonly string[])[] = [];
  service.watchLeases((tokens) => reports.push(tokens));
  const signal = new AbortController().signal;
  const acquire = async (name: string): Promise<Lease> => {
    const result = await service.acquire({ name, ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal });
    if (!result.acquired) throw new Error('not acquired');
    return { name, ownerId: 'me', ...result.grant };
  };
  const nodes = (): string[] => ['a', 'b', 'c'].flatMap((name) => zk.children(`/locks/${name}`));
  return { clock, zk, service, reports, signal, acquire, nodes };
}

describe('release() of a grant whose session ended', () => {
  it('after a pause past the session timeout: false at once, nothing sent; the node is deleted, the client kept the session', async () => {
    const { clock, zk, service, reports, acquire, nodes } = await setup();
    const lease = await acquire('a');
    const before = zk.calls.length;
    clock.jump(TIMEOUT + 500); // nothing ran: no tick, no heartbeat
    expect(await service.release(lease)).toBe(false);
    expect(reports).toEqual([[lease.ownershipToken]]);
    expect(service.session).toBeUndefined();
    // The client never noticed (the server kept the session): the node is deleted as a leftover, not released.
    await clock.advance(0);
    expect(zk.calls.slice(before)).toEqual([`delete /locks/a/${lease.ownershipToken}`]);
    expect(nodes()).toEqual([]);
    await service.close();
  });

  it('a delete in flight when the session ends: false, not a transport error; deleted when the session comes back', async () => {
    // Requests outlive the session here, so that the delete is still unanswered when the session is given up.
    const { clock, zk, service, reports, acquire, nodes } = await setup({ requestTimeoutMs: 2 * TIMEOUT });
    const lease = await acquire('a');
    zk.setState(DISCONNECTED);
    zk.silent = true;
    const released = service.release(lease).then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    await clock.advance(TIMEOUT);
    expect(service.session).toBeUndefined(); // given up on, with the delete still in flight
    expect(reports).toEqual([]); // released already: not reported lost
    await clock.advance(TIMEOUT + 2 * TICK);
    expect(await released).toEqual({ value: false });
    expect(nodes()).toHaveLength(1);

    zk.silent = false;
    zk.setState(CONNECTED);
    await clock.advance(0);
    expect(nodes()).toEqual([]);
    await service.close();
  });

  it('a delete that fails while the session lives: still a transport error (the outcome is unknown)', async () => {
    const { clock, zk, service, acquire, nodes } = await setup();
    const lease = await acquire('a');
    zk.silent = true;
    const released = rejection(service.release(lease));
    await clock.advance(TIMEOUT / 3 + 2 * TICK);
    expect(await released).toMatchObject({ code: 'TRANSPORT' });
    expect(service.session).toBeDefined();
    zk.silent = false;
    const closing = service.close();
    await clock.advance(TIMEOUT);
    await closing;
    // The node whose delete was still being retried went with close()'s sweep, not with the retry it stopped.
    expect(nodes()).toEqual([]);
  });
});

describe('the nodes of a session given up on, with a client passed in', () => {
  async function giveUp() {
    const s = await setup();
    const held = [await s.acquire('a'), await s.acquire('b'), await s.acquire('c')];
    // A second contender for `c`, queued behind the first.
    const waiting = s.service.acquire({
      name: 'c',
      ownerId: 'me',
      ttlMs: 1_000,
      waitMs: 60_000,
      signal: s.signal,
    });
    const waited = rejection(waiting);
    await s.clock.advance(TICK);
    expect(s.nodes()).toHaveLength(4);
    s.zk.setState(DISCONNECTED);
    s.zk.silent = true;
    await s.clock.advance(TIMEOUT);
    expect(s.service.session).toBeUndefined();
    expect(await waited).toMatchObject({ code: 'TRANSPORT' });
    expect(s.reports.flat().sort()).toEqual(held.map((l) => l.ownershipToken).sort());
    // The fake server kept the session, and so every node.
    expect(s.nodes()).toHaveLength(4);
    s.zk.silent = false;
    return s;
  }

  it('are deleted when the client is connected under that session again; the service still never reuses it', async () => {
    const { clock, zk, service, nodes, signal } = await giveUp();
    const before = zk.calls.length;
    zk.setState(CONNECTED);
    await clock.advance(0);
    expect(nodes()).toEqual([]);
    expect(zk.calls.slice(before).filter((c) => c.startsWith('delete'))).toHaveLength(4);
    expect(
      await rejection(service.acquire({ name: 'a', ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal })),
    ).toMatchObject({ code: 'TRANSPORT' });
    await service.close();
  });

  it('are forgotten, with nothing sent, when the session expired after all', async () => {
    const { clock, zk, service, nodes } = await giveUp();
    zk.expireSession();
    const before = zk.calls.length;
    zk.setState(EXPIRED);
    await clock.advance(TIMEOUT);
    expect(nodes()).toEqual([]); // the server deleted them
    expect(zk.calls.slice(before).filter((c) => c.startsWith('delete'))).toEqual([]);
    await service.close();
  });

  it('that the first try could not delete are deleted by close(), the client being connected under that session', async () => {
    const { clock, zk, service, reports, acquire, nodes } = await setup();
    const lease = await acquire('a');
    zk.silent = true; // still "connected", but nothing answers
    await clock.advance(TIMEOUT);
    expect(reports).toEqual([[lease.ownershipToken]]);
    await clock.advance(TIMEOUT / 3 + 2 * TICK); // the first try's delete runs out of time
    expect(nodes()).toHaveLength(1);
    zk.silent = false;
    const closing = service.close();
    await clock.advance(0);
    await closing;
    expect(nodes()).toEqual([]);
  });
});

describe('close() while the client passed in is not connected under the session', () => {
  /** A service holding `a` and `b`, closed while its client is disconnected: close() settles, the nodes stay. */
  async function closedWhileDisconnected() {
    const s = await setup();
    await s.acquire('a');
    await s.acquire('b');
    s.zk.setState(DISCONNECTED);
    const closing = s.service.close();
    await s.clock.advance(0);
    await closing;
    expect(s.nodes()).toHaveLength(2); // nothing could be sent
    expect(s.zk.stateListeners).toBe(1); // still followed, for them
    expect(s.clock.pendingTimers).toBe(0);
    return s;
  }

  it('its nodes are deleted when the client reconnects under that session, and the client is let go', async () => {
    const { clock, zk, nodes } = await closedWhileDisconnected();
    const before = zk.calls.length;
    zk.setState(CONNECTED);
    await clock.advance(0);
    expect(nodes()).toEqual([]);
    expect(zk.calls.slice(before).filter((c) => c.startsWith('delete'))).toHaveLength(2);
    expect(zk.stateListeners).toBe(0);
  });

  it('a delete that goes unanswered after close() is bounded, and retried on the next reconnect', async () => {
    const { clock, zk, nodes } = await closedWhileDisconnected();
    zk.silent = true;
    zk.setState(CONNECTED);
    await clock.advance(TIMEOUT); // past the request timeout
    expect(clock.pendingTimers).toBe(0);
    expect(nodes()).toHaveLength(2);
    expect(zk.stateListeners).toBe(1);
    zk.silent = false;
    zk.setState(DISCONNECTED);
    zk.setState(CONNECTED);
    await clock.advance(0);
    expect(nodes()).toEqual([]);
    expect(zk.stateListeners).toBe(0);
  });

  it('its nodes are forgotten, with nothing sent, when the session expires', async () => {
    const { clock, zk, nodes } = await closedWhileDisconnected();
    zk.expireSession();
    const before = zk.calls.length;
    zk.setState(EXPIRED);
    await clock.advance(0);
    expect(nodes()).toEqual([]); // the server deleted them
    expect(zk.calls.slice(before)).toEqual([]);
    expect(zk.stateListeners).toBe(0);
  });

  it('its nodes are forgotten, with nothing sent, when the client comes back under another session', async () => {
    const { clock, zk } = await closedWhileDisconnected();
    zk.expireSession();
    const before = zk.calls.length;
    zk.setState(CONNECTED);
    await clock.advance(0);
    expect(zk.calls.slice(before)).toEqual([]);
    expect(zk.stateListeners).toBe(0);
  });

  it('with nothing left over, close() lets the client go at once', async () => {
    const { clock, zk, service, acquire } = await setup();
    const lease = await acquire('a');
    expect(await service.release(lease)).toBe(true);
    zk.setState(DISCONNECTED);
    const closing = service.close();
    await clock.advance(0);
    await closing;
    expect(zk.stateListeners).toBe(0);
  });
});
